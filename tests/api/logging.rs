//! The binary's JSON logs: work an HTTP request starts in an actor (a connect, an approved
//! call's execution) logs under that request's id.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

pub const ADMIN_KEY: &str = "logging-test-admin-key-0123456789";

pub async fn wait_for_line(
    lines: &Mutex<Vec<String>>,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> String {
    for _ in 0..200 {
        if let Some(line) = lines.lock().unwrap().iter().find(|l| wanted(l)) {
            return line.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no log line {what}; got:\n{}",
        lines.lock().unwrap().join("\n")
    );
}

/// The binary, serving with JSON logs on a free port; its log lines are collected.
pub struct Binary {
    pub child: tokio::process::Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    pub base: String,
    /// `http://127.0.0.1:<gRPC port>` (empty with `grpc.enabled = false`).
    pub grpc: String,
    /// The service's data directory: it must outlive the service, so whoever takes the
    /// binary apart keeps it bound.
    pub data_dir: tempfile::TempDir,
}

impl Binary {
    /// A request to the binary as the admin acting for user `u`, under `request_id`.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        request_id: &str,
        body: Value,
    ) -> reqwest::Result<reqwest::Response> {
        reqwest::Client::new()
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(ADMIN_KEY)
            .header("X-User-Id", "u")
            .header("X-Request-Id", request_id)
            .json(&body)
            .send()
            .await
    }
}

/// `extra_env` comes last, so it may override the data directory.
pub async fn start_binary(extra_env: &[(&str, &str)]) -> Binary {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-pool"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("MCP_POOL__STORAGE__DATA_DIR", dir.path())
        .env("MCP_POOL__SERVER__PORT", "0")
        .env("MCP_POOL__GRPC__PORT", "0")
        .env("MCP_POOL__LOG__FORMAT", "json")
        .env("RUST_LOG", "info")
        .env("MCP_POOL_ADMIN_KEY", ADMIN_KEY)
        .env(
            "MCP_POOL__POOL__SANDBOX__READ_ONLY_PATHS",
            crate::helpers::sandbox_shared_paths().join(","),
        )
        .envs(extra_env.iter().copied())
        .current_dir(dir.path())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    {
        let lines = lines.clone();
        let mut reader = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().unwrap().push(line);
            }
        });
    }
    let listening = wait_for_line(&lines, "saying where it listens", |l| {
        l.contains("mcp-pool listening")
    })
    .await;
    let listening: Value = serde_json::from_str(&listening).expect("a JSON log line");
    let port = listening["fields"]["port"].as_u64().expect("port field");
    // Logged just before the HTTP port.
    let grpc = lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["fields"]["message"] == "gRPC listening")
        .and_then(|l| l["fields"]["port"].as_u64())
        .map(|port| format!("http://127.0.0.1:{port}"))
        .unwrap_or_default();
    Binary {
        child,
        lines,
        base: format!("http://127.0.0.1:{port}"),
        grpc,
        data_dir: dir,
    }
}

#[tokio::test]
async fn actor_work_logs_under_the_request_id_that_started_it() {
    let mut binary = start_binary(&[]).await;
    let created: Value = binary
        .send(
            reqwest::Method::POST,
            "/api/mcp-servers",
            "req-create",
            json!({"name": "calc", "type": "embedded", "embedded": "calculator"}),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let server = created["id"].as_str().expect("server id").to_owned();
    let connected = binary
        .send(
            reqwest::Method::POST,
            &format!("/api/mcp-servers/{server}/connect"),
            "req-connect-7f3a",
            json!({}),
        )
        .await
        .unwrap();
    assert!(connected.status().is_success());
    binary
        .send(
            reqwest::Method::PUT,
            "/api/assistants/a1/mcp-servers",
            "req-bind",
            json!({"serverIds": [server]}),
        )
        .await
        .unwrap();
    let message = uuid::Uuid::new_v4();
    let parked: Value = binary
        .send(
            reqwest::Method::POST,
            &format!("/api/messages/{message}/tool-calls"),
            "req-submit",
            json!({"assistantId": "a1", "calls": [
                {"id": "c1", "name": "mcp__calc__add", "arguments": {"a": 2, "b": 3}}
            ]}),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(parked["toolCalls"][0]["status"], "pending", "{parked}");
    let approved = binary
        .send(
            reqwest::Method::POST,
            &format!("/api/messages/{message}/tool-confirm"),
            "req-approve-91c2",
            json!({"toolCallId": "c1", "approved": true}),
        )
        .await
        .unwrap();
    assert!(approved.status().is_success());

    wait_for_line(
        &binary.lines,
        "for the connect, under its request id",
        |l| l.contains("MCP connection established") && l.contains("req-connect-7f3a"),
    )
    .await;
    wait_for_line(
        &binary.lines,
        "for the approved call, under the approval's request id",
        |l| l.contains("tool call executed") && l.contains("req-approve-91c2"),
    )
    .await;
    binary.child.kill().await.unwrap();
}

#[tokio::test]
async fn a_servers_log_message_is_logged_under_the_request_of_its_call() {
    let mut binary = start_binary(&[]).await;
    let preset = binary
        .send(
            reqwest::Method::POST,
            "/admin/presets",
            "req-preset",
            crate::upstreams::fixture_preset(),
        )
        .await
        .unwrap();
    assert!(preset.status().is_success(), "{:?}", preset.text().await);
    let created: Value = binary
        .send(
            reqwest::Method::POST,
            "/api/mcp-servers",
            "req-create",
            json!({"name": "fx", "preset": "fixture"}),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let server = created["id"].as_str().expect("server id").to_owned();
    let called = binary
        .send(
            reqwest::Method::POST,
            &format!("/api/mcp-servers/{server}/tools/log/call"),
            "req-log-5d1e",
            json!({"arguments": {"text": "cache warmed", "level": "notice"}}),
        )
        .await
        .unwrap();
    assert!(called.status().is_success());
    wait_for_line(
        &binary.lines,
        "the server's log message, under the call's request id",
        |l| {
            l.contains("server log message")
                && l.contains("cache warmed")
                && l.contains("req-log-5d1e")
        },
    )
    .await;
    binary.child.kill().await.unwrap();
}

/// With `--features otlp` and `log.otlp_endpoint` set, request spans reach an OTLP/HTTP
/// collector (here a loopback one keeping what it is sent), flushed at the latest when the
/// service stops.
#[cfg(feature = "otlp")]
#[tokio::test]
async fn request_spans_are_exported_to_an_otlp_collector() {
    use axum::body::Bytes;
    use axum::extract::State;

    type Received = Arc<Mutex<Vec<Bytes>>>;
    let received: Received = Arc::default();
    let collector = axum::Router::new()
        .route(
            "/v1/traces",
            axum::routing::post(|State(received): State<Received>, body: Bytes| async move {
                received.lock().unwrap().push(body);
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, collector).await });

    let Binary {
        mut child,
        base,
        data_dir: _data_dir,
        ..
    } = start_binary(&[
        ("MCP_POOL__LOG__OTLP_ENDPOINT", &collector_url),
        ("MCP_POOL__LOG__OTLP_SERVICE_NAME", "mcp-pool-otlp-test"),
    ])
    .await;
    let listed = reqwest::Client::new()
        .get(format!("{base}/api/mcp-servers"))
        .bearer_auth(ADMIN_KEY)
        .header("X-User-Id", "u")
        .header("X-Request-Id", "otlp-req-5d1e")
        .send()
        .await
        .unwrap();
    assert!(listed.status().is_success());

    // SIGTERM: the service stops gracefully and flushes the export on its way out.
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the service stops after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");

    let contains = |needle: &str| {
        received
            .lock()
            .unwrap()
            .iter()
            .any(|body| body.windows(needle.len()).any(|w| w == needle.as_bytes()))
    };
    assert!(
        contains("otlp-req-5d1e"),
        "no exported span carries the request id ({} export requests)",
        received.lock().unwrap().len()
    );
    assert!(
        contains("mcp-pool-otlp-test"),
        "the service name is exported"
    );
}
