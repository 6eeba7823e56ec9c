//! The real nginx with `deploy/nginx.conf` in front of three instances on one PostgreSQL
//! database, all on loopback: a user's requests stay on one instance, a gateway session
//! stays on the instance that holds it, an approval routed to another instance than the
//! parked call is forwarded to it, and when an instance is killed only its users move.
//!
//! Where a request landed is read from the `X-Instance-Id` every answer carries. Needs
//! PostgreSQL (instances reach each other through NOTIFY) and an `nginx` binary (Debian's
//! package; `.ci/run` installs it): without either the test says so and passes.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::cluster::{another_process, fast_heartbeat};
use crate::helpers::{ADMIN_KEY, Reply, TestApp, into_reply, spawn_pool_app_with};
use crate::upstreams::{eventually, free_port, text_of};

/// Debian installs nginx into /usr/sbin, which is not on every user's PATH.
pub(crate) fn nginx_binary() -> Option<PathBuf> {
    ["nginx", "/usr/sbin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|binary| {
            std::process::Command::new(binary)
                .arg("-v")
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        })
}

/// From `nginx version: nginx/1.22.1` (written to stderr).
pub(crate) fn nginx_version(binary: &Path) -> (u32, u32, u32) {
    let output = std::process::Command::new(binary)
        .arg("-v")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stderr);
    let version = text
        .split("nginx/")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no version in {text:?}"));
    let mut parts = version.split('.').map(|n| n.parse().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

/// A temporary prefix nginx's workers can use: run as root, they are `nobody` and must
/// reach the paths nginx creates there and hands over.
pub(crate) fn nginx_prefix() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// nginx in the foreground on `conf` under `prefix`, killed when dropped; stdout discarded.
pub(crate) fn nginx_command(binary: &Path, prefix: &Path, conf: &Path) -> Command {
    let mut command = Command::new(binary);
    command
        .arg("-p")
        .arg(prefix)
        .arg("-c")
        .arg(conf)
        .args(["-e", "stderr", "-g"])
        // One process: killing it leaves no orphaned worker holding the port.
        .arg(format!(
            "daemon off; master_process off; pid {}/nginx.pid;",
            prefix.display()
        ))
        .stdout(Stdio::null())
        .kill_on_drop(true);
    command
}

fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "deploy/nginx.conf has `{from}` exactly once"
    );
    text.replacen(from, to, 1)
}

/// `deploy/nginx.conf` with the instances' loopback addresses in place of the compose
/// service names and free loopback ports in place of 8080 and 50051; temporary files go
/// to `dir`. Each replaced line must be in the file exactly once, so the test keeps
/// following the real file.
fn loopback_config(
    http: &[&str],
    grpc: &[&str],
    (listen, grpc_listen): (u16, u16),
    dir: &Path,
    version: (u32, u32, u32),
) -> String {
    let mut conf =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/nginx.conf")).unwrap();
    for (n, (http, grpc)) in http.iter().zip(grpc).enumerate() {
        let host = |url: &str| url.trim_start_matches("http://").to_owned();
        let n = n + 1;
        conf = replace_once(
            &conf,
            &format!("mcp-pool-{n}:8080 "),
            &format!("{} ", host(http)),
        );
        conf = replace_once(
            &conf,
            &format!("mcp-pool-{n}:50051 "),
            &format!("{} ", host(grpc)),
        );
    }
    conf = replace_once(
        &conf,
        "listen 8080;",
        &format!("listen 127.0.0.1:{listen};"),
    );
    // `http2 on` came with nginx 1.25.1 (the compose file runs 1.27); older ones, such as
    // Debian 12's 1.22, take it as a parameter of `listen`.
    let old_http2 = version < (1, 25, 1);
    conf = replace_once(
        &conf,
        "listen 50051;",
        &format!(
            "listen 127.0.0.1:{grpc_listen}{};",
            if old_http2 { " http2" } else { "" }
        ),
    );
    if old_http2 {
        conf = replace_once(&conf, "http2 on;", "");
    }
    // The package's build puts temporary files and the access log under /var.
    let dir = dir.display();
    replace_once(
        &conf,
        "http {",
        &format!(
            "http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
"
        ),
    )
}

/// nginx in the foreground on loopback, killed when dropped.
struct Nginx {
    base: String,
    grpc: String,
    client: reqwest::Client,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl Nginx {
    async fn start(binary: &Path, http: &[&str], grpc: &[&str]) -> Self {
        let dir = nginx_prefix();
        let ports = (free_port(), free_port());
        let conf = dir.path().join("nginx.conf");
        let text = loopback_config(http, grpc, ports, dir.path(), nginx_version(binary));
        std::fs::write(&conf, text).unwrap();
        let mut child = nginx_command(binary, dir.path(), &conf)
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn({
            let log = log.clone();
            async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    log.lock().unwrap().push(line);
                }
            }
        });
        let nginx = Self {
            base: format!("http://127.0.0.1:{}", ports.0),
            grpc: format!("http://127.0.0.1:{}", ports.1),
            client: reqwest::Client::new(),
            _child: child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ready = nginx
                .client
                .get(format!("{}/healthz", nginx.base))
                .send()
                .await
                .is_ok_and(|r| r.status() == StatusCode::OK);
            if ready {
                return nginx;
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not answer:\n{}",
                log.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base))
    }

    /// A request of `user` with the service key, through nginx.
    async fn user(
        &self,
        app: &TestApp,
        user: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut request = self
            .request(method, path)
            .bearer_auth(&app.service_key)
            .header("X-User-Id", user);
        if let Some(body) = body {
            request = request.json(&body);
        }
        into_reply(request.send().await.expect("nginx answers")).await
    }
}

/// The instance that answered.
fn served_by(headers: &reqwest::header::HeaderMap) -> String {
    headers
        .get("x-instance-id")
        .expect("every answer names its instance")
        .to_str()
        .unwrap()
        .to_owned()
}

/// A gateway session spoken by hand (streamable HTTP), so that the instance behind every
/// answer can be read.
#[derive(Clone)]
struct GatewaySession {
    client: reqwest::Client,
    url: String,
    token: String,
    id: String,
    /// The instance that answered the `initialize`.
    instance: String,
}

impl GatewaySession {
    async fn open(nginx: &Nginx, token: &str) -> Self {
        let mut session = Self {
            client: nginx.client.clone(),
            url: format!("{}/mcp/assistants/a1", nginx.base),
            token: token.to_owned(),
            id: String::new(),
            instance: String::new(),
        };
        let response = session
            .post(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "nginx-test", "version": "0"}}}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        session.instance = served_by(response.headers());
        session.id = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        answer(response, 0).await;
        session
    }

    async fn post(&self, message: Value) -> reqwest::Response {
        let mut request = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("Accept", "application/json, text/event-stream")
            .json(&message);
        if !self.id.is_empty() {
            request = request
                .header("Mcp-Session-Id", &self.id)
                .header("MCP-Protocol-Version", "2025-06-18");
        }
        request.send().await.expect("nginx answers")
    }

    /// Sends a request; returns the instance that answered and the result.
    async fn request(&self, id: u64, method: &str, params: Value) -> (String, Value) {
        let response = self
            .post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        assert_eq!(response.status(), StatusCode::OK, "{method}");
        (served_by(response.headers()), answer(response, id).await)
    }

    /// Sends a notification; returns the instance that accepted it.
    async fn notify(&self, method: &str) -> String {
        let response = self.post(json!({"jsonrpc": "2.0", "method": method})).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{method}");
        served_by(response.headers())
    }

    /// Ends the session; returns the instance that ended it.
    async fn close(&self) -> String {
        let response = self
            .client
            .delete(&self.url)
            .bearer_auth(&self.token)
            .header("Mcp-Session-Id", &self.id)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        served_by(response.headers())
    }
}

/// The result of JSON-RPC request `id`, from a JSON body or from an event stream
/// (notifications before it are skipped).
async fn answer(response: reqwest::Response, id: u64) -> Value {
    let message = crate::helpers::jsonrpc_answer(response, id).await;
    assert!(message.get("error").is_none(), "{message}");
    message["result"].clone()
}

#[tokio::test]
async fn nginx_keeps_users_and_gateway_sessions_on_one_instance_and_survives_a_killed_one() {
    if !std::env::var("DATABASE_URL").is_ok_and(|url| url.starts_with("postgres")) {
        eprintln!("skipped: nginx in front of several instances needs DATABASE_URL=postgres://…");
        return;
    }
    let Some(binary) = nginx_binary() else {
        eprintln!("skipped: no nginx binary (apt-get install nginx)");
        return;
    };
    let a = spawn_pool_app_with(fast_heartbeat).await;
    let b = a.another_instance().await;
    // A process of its own, to be killed below.
    let mut c = another_process(&a).await;
    let bases = [a.address.clone(), b.address.clone(), c.base.clone()];
    let mut ids = Vec::new();
    for base in &bases {
        let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
        ids.push(served_by(health.headers()));
    }
    let nginx = Nginx::start(
        &binary,
        &[&a.address, &b.address, &c.base],
        &[&a.grpc_address, &b.grpc_address, &c.grpc],
    )
    .await;
    let server = a.fixture_for_a1(&["echo"]).await;

    // Affinity: every request of a user reaches the same instance; users spread over all
    // three.
    let mut home = BTreeMap::new();
    let candidates = std::iter::once("u".to_owned()).chain((0..60).map(|n| format!("user-{n}")));
    for user in candidates {
        let mut instances = Vec::new();
        for _ in 0..3 {
            let list = nginx
                .user(&a, &user, Method::GET, "/api/mcp-servers", None)
                .await;
            assert_eq!(list.status, StatusCode::OK, "{}", list.text);
            instances.push(served_by(&list.headers));
        }
        assert!(
            instances.iter().all(|i| *i == instances[0]),
            "{instances:?}"
        );
        home.insert(user, instances[0].clone());
        if ids
            .iter()
            .all(|id| home.values().filter(|h| *h == id).count() >= 2)
        {
            break;
        }
    }
    for id in &ids {
        assert!(home.values().any(|h| h == id), "no user on {id}: {home:?}");
    }
    let u_home = home["u"].clone();
    // Which is what keeps a user's connection in one place.
    let echo = nginx
        .user(
            &a,
            "u",
            Method::POST,
            &format!("/api/mcp-servers/{server}/tools/echo/call"),
            Some(json!({"arguments": {"text": "hi"}})),
        )
        .await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    assert_eq!(served_by(&echo.headers), u_home);
    for (id, base) in ids.iter().zip(&bases) {
        let connections: Value = nginx
            .client
            .get(format!("{base}/admin/connections?userId=u"))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let held = connections["connections"].as_array().unwrap().len();
        assert_eq!(held, usize::from(*id == u_home), "{id}: {connections}");
    }

    // The service's own errors are answers, not a failed instance: a user's unreachable
    // MCP server answers 502 from the user's instance every time, and nginx keeps that
    // instance in rotation.
    let down = nginx
        .user(
            &a,
            "u",
            Method::POST,
            "/api/mcp-servers",
            Some(
                json!({"name": "down", "baseUrl": format!("http://127.0.0.1:{}/mcp", free_port())}),
            ),
        )
        .await;
    assert_eq!(down.status, StatusCode::CREATED, "{}", down.text);
    let down = down.body["id"].as_str().unwrap();
    for _ in 0..3 {
        let tools = nginx
            .user(
                &a,
                "u",
                Method::GET,
                &format!("/api/mcp-servers/{down}/tools"),
                None,
            )
            .await;
        assert_eq!(tools.status, StatusCode::BAD_GATEWAY, "{}", tools.text);
        assert_eq!(tools.code(), "MCP_CONNECTION_ERROR", "{}", tools.text);
        assert_eq!(served_by(&tools.headers), u_home, "not tried elsewhere");
    }
    for (user, instance) in &home {
        let list = nginx
            .user(&a, user, Method::GET, "/api/mcp-servers", None)
            .await;
        assert_eq!(&served_by(&list.headers), instance, "{user} stays");
    }

    // A client's request id reaches the service and comes back.
    let traced = nginx
        .request(Method::GET, "/healthz")
        .header("X-Request-Id", "through-nginx-1")
        .send()
        .await
        .unwrap();
    assert_eq!(traced.headers()["x-request-id"], "through-nginx-1");

    // gRPC goes through the same way.
    let mut grpc =
        mcp_pool::grpc::proto::mcp_pool_client::McpPoolClient::connect(nginx.grpc.clone())
            .await
            .unwrap();
    let tools = grpc
        .get_tools(crate::grpc::as_user(
            &a,
            "u",
            mcp_pool::grpc::proto::GetToolsRequest {
                assistant_id: "a1".into(),
            },
        ))
        .await
        .expect("GetTools through nginx")
        .into_inner();
    assert!(
        tools.tools.iter().any(|t| t.tool_name == "add"),
        "{tools:?}"
    );

    // A gateway session is routed by its token, so it stays on the instance holding it;
    // a call it parks is approved by the user, whose requests go to their own instance,
    // which forwards the approval. Tokens are made until the two instances differ.
    let events = nginx
        .request(Method::GET, "/api/events")
        .bearer_auth(&a.service_key)
        .header("X-User-Id", "u")
        .send()
        .await
        .unwrap();
    assert_eq!(served_by(events.headers()), u_home);
    let mut events = sse_stream::SseStream::from_bytes_stream(events.bytes_stream());
    let mut session = None;
    for n in 0..10 {
        let token = nginx
            .user(
                &a,
                "u",
                Method::POST,
                "/api/assistants/a1/gateway-tokens",
                Some(json!({"name": format!("desktop-{n}")})),
            )
            .await;
        assert_eq!(token.status, StatusCode::CREATED, "{}", token.text);
        let opened = GatewaySession::open(&nginx, token.body["token"].as_str().unwrap()).await;
        if opened.instance != u_home {
            session = Some(opened);
            break;
        }
        opened.close().await;
    }
    let session = session.expect("a token routed to another instance than the user's");
    let gateway = session.instance.clone();
    assert_eq!(session.notify("notifications/initialized").await, gateway);
    let (instance, tools) = session.request(1, "tools/list", json!({})).await;
    assert_eq!(instance, gateway);
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "fx__add"),
        "{tools}"
    );
    let parked = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .request(
                    2,
                    "tools/call",
                    json!({"name": "fx__add", "arguments": {"a": 1, "b": 2}}),
                )
                .await
        }
    });
    let pending = loop {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("the parked call is announced on the user's stream")
            .unwrap()
            .unwrap();
        let data: Value = event
            .data
            .and_then(|data| serde_json::from_str(&data).ok())
            .unwrap_or_default();
        if data["toolCall"]["status"] == "pending" {
            break data;
        }
    };
    assert!(!parked.is_finished(), "the call waits for the decision");
    let approve = nginx
        .user(
            &a,
            "u",
            Method::POST,
            &format!(
                "/api/messages/{}/tool-confirm",
                pending["messageId"].as_str().unwrap()
            ),
            Some(json!({"toolCallId": pending["toolCall"]["id"], "approved": true})),
        )
        .await;
    assert_eq!(approve.status, StatusCode::OK, "{}", approve.text);
    assert_eq!(served_by(&approve.headers), u_home, "not the gateway's");
    let (instance, result) = tokio::time::timeout(Duration::from_secs(20), parked)
        .await
        .expect("the approved call answers")
        .unwrap();
    assert_eq!(instance, gateway);
    assert_eq!(text_of(&result), "3", "{result}");
    assert_eq!(session.close().await, gateway);

    // An instance killed: its users move to the others at once, everyone else stays
    // where they were, and a live instance settles the calls it held.
    let killed = ids[2].clone();
    let (v, _) = home
        .iter()
        .find(|(user, h)| **h == killed && *user != "u")
        .expect("a user on the instance to kill");
    let v = v.clone();
    let fx = nginx
        .user(
            &a,
            &v,
            Method::POST,
            "/api/mcp-servers",
            Some(json!({"name": "fx", "preset": "fixture", "autoApproveTools": ["echo"]})),
        )
        .await;
    assert_eq!(fx.status, StatusCode::CREATED, "{}", fx.text);
    let fx = fx.body["id"].as_str().unwrap().to_owned();
    let bind = nginx
        .user(
            &a,
            &v,
            Method::PUT,
            "/api/assistants/a1/mcp-servers",
            Some(json!({"serverIds": [&fx]})),
        )
        .await;
    assert_eq!(bind.status, StatusCode::OK, "{}", bind.text);
    let message = Uuid::new_v4().to_string();
    let parked = nginx
        .user(
            &a,
            &v,
            Method::POST,
            &format!("/api/messages/{message}/tool-calls"),
            Some(json!({"assistantId": "a1", "calls": [
                {"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}}]})),
        )
        .await;
    assert_eq!(
        parked.body["toolCalls"][0]["status"], "pending",
        "{}",
        parked.text
    );
    assert_eq!(served_by(&parked.headers), killed);

    c.child.kill().await.unwrap();
    let mut moved = BTreeMap::new();
    for (user, instance) in &home {
        let list = nginx
            .user(&a, user, Method::GET, "/api/mcp-servers", None)
            .await;
        assert_eq!(list.status, StatusCode::OK, "{user}: {}", list.text);
        let now = served_by(&list.headers);
        if *instance == killed {
            assert_ne!(now, killed, "{user} moved");
            moved.insert(user.clone(), now);
        } else {
            assert_eq!(&now, instance, "{user} stays");
        }
    }
    let echo = nginx
        .user(
            &a,
            &v,
            Method::POST,
            &format!("/api/mcp-servers/{fx}/tools/echo/call"),
            Some(json!({"arguments": {"text": "still here"}})),
        )
        .await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    assert_eq!(text_of(&echo.body), "still here");
    assert_eq!(
        served_by(&echo.headers),
        moved[&v],
        "{v} stays where it moved"
    );
    let record = || async {
        nginx
            .user(
                &a,
                &v,
                Method::GET,
                &format!("/api/messages/{message}"),
                None,
            )
            .await
            .body["toolCalls"][0]
            .clone()
    };
    eventually("the killed instance's parked call is settled", || async {
        record().await["status"] == "cancelled"
    })
    .await;
    assert_eq!(
        record().await["response"],
        "interrupted: the service instance holding this call stopped"
    );
}
