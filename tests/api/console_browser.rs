//! The operators' console (`/console`) in a real browser: node:test scripts in
//! `tests/console/` drive Debian's chromium through playwright-core (both installed by
//! `tests/setup.sh`) against a service started here.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use serde_json::json;
use uuid::Uuid;

use crate::helpers::{ADMIN_KEY, TestApp, spawn_pool_app};

/// How long one script may run, browser start included.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// Debian's chromium (`apt-get install chromium`).
const CHROMIUM: &str = "/usr/bin/chromium";

/// The console as an operator uses it (`tests/console/console.test.mjs`): sign-in, live
/// connections, stop, escaping, approving a parked call, a tool form, keys, the audit log,
/// a phone in dark mode. Screenshots of each page go to `target/console-screenshots/`.
#[tokio::test]
async fn an_operator_uses_the_console_in_a_real_browser() {
    let app = spawn_pool_app().await;
    // User `u` with the fixture `fx` bound to assistant a1, `echo` auto-approved.
    let server = app.fixture_for_a1(&["echo"]).await;
    let xss_server = app
        .create_server_ok(
            "u",
            json!({"name": "<script>window.__xss=1</script>", "preset": "fixture"}),
        )
        .await;
    app.gateway_token("u", "a1").await;
    // A fixture whose `form` tool has nested objects, arrays, enums and booleans.
    let mut form_preset = crate::upstreams::fixture_preset();
    form_preset["name"] = json!("fixture-form");
    form_preset["args"] = json!(["stdio", "--form-tool"]);
    app.create_preset_ok(form_preset).await;
    let form_server = app
        .create_server_ok("u", json!({"name": "forms", "preset": "fixture-form"}))
        .await;
    // Two pages of audit entries: 30 auto-approved calls, run at once.
    app.run_echo_calls(15).await;
    app.run_echo_calls(15).await;
    // One call parked for approval.
    let message = Uuid::new_v4().to_string();
    let parked = app
        .submit_calls(
            "u",
            &message,
            "",
            json!([{"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}}]),
        )
        .await;
    assert_eq!(
        parked.body["toolCalls"][0]["status"], "pending",
        "{}",
        parked.text
    );

    let output = run_console_script(
        &app,
        "console.test.mjs",
        &[
            ("USER_ID", "u".to_owned()),
            ("SERVER_ID", server),
            ("XSS_SERVER", xss_server),
            ("MESSAGE_ID", message),
            ("FORM_SERVER", form_server),
        ],
    )
    .await;
    // node's spec reporter closes with `ℹ tests N` and `ℹ pass N`.
    let count = |label: &str| reported(&output, label);
    assert_eq!(count("tests"), Some(12), "{output}");
    assert_eq!(count("pass"), Some(12), "{output}");
    app.stop().await;
}

/// An operator's daily jobs at 1366 px and 390 px (`tests/console/operator.test.mjs`):
/// find a user by part of their id, approve a stranger's waiting call and see its result,
/// read why a connection broke and retry it, disable a user's tool and see the audit row,
/// export the audit for a filter; action buttons in view and no serious axe-core finding
/// on every page.
#[tokio::test]
async fn an_operator_finds_users_servers_and_waiting_calls_at_a_laptops_and_a_phones_width() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(crate::upstreams::fixture_preset())
        .await;
    let known = "acme-support-7";
    let fx = app
        .create_server_ok(known, json!({"name": "fx", "preset": "fixture"}))
        .await;
    let echoed = app
        .call(known, &fx, "echo", json!({"text": "from the console test"}))
        .await;
    assert_eq!(echoed.status, reqwest::StatusCode::OK, "{}", echoed.text);
    // A user the operator never heard of, with two calls waiting (one per width).
    let stranger = "zq-4471";
    let theirs = app
        .create_server_ok(stranger, json!({"name": "fx", "preset": "fixture"}))
        .await;
    app.bind_ok(stranger, "a1", [&theirs]).await;
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let message = Uuid::new_v4().to_string();
        let parked = app
            .submit_calls(
                stranger,
                &message,
                "",
                json!([{"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 2, "b": 3}}]),
            )
            .await;
        assert_eq!(
            parked.body["toolCalls"][0]["status"], "pending",
            "{}",
            parked.text
        );
        waiting.push(message);
    }
    // A server on a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let broken_user = "broken-user";
    app.create_server_ok(
        broken_user,
        json!({"name": "weather", "type": "streamableHttp",
               "baseUrl": format!("http://127.0.0.1:{port}/mcp")}),
    )
    .await;

    let output = run_console_script(
        &app,
        "operator.test.mjs",
        &[
            ("KNOWN_USER", known.to_owned()),
            ("STRANGER", stranger.to_owned()),
            ("WAITING_1", waiting[0].clone()),
            ("WAITING_2", waiting[1].clone()),
            ("BROKEN_USER", broken_user.to_owned()),
        ],
    )
    .await;
    let count = |label: &str| reported(&output, label);
    assert_eq!(count("tests"), Some(2), "{output}");
    assert_eq!(count("pass"), Some(2), "{output}");
    app.stop().await;
}

/// The Catalog page at 1366 px and 390 px (`tests/console/catalog.test.mjs`): find and
/// enable a built-in entry, import a pasted server.json and read why an invalid one is
/// refused, and see on the Servers and Users pages which entry a user's server came from.
#[tokio::test]
async fn an_operator_runs_the_catalog_in_a_real_browser() {
    let app = spawn_pool_app().await;
    let entry = "io.example/weather";
    let imported = app
        .admin(
            reqwest::Method::POST,
            "/admin/catalog",
            Some(json!({
                "name": entry, "description": "Weather, remote", "version": "1.0.0",
                "remotes": [{"type": "streamable-http", "url": "https://93.184.216.34/mcp"}]
            })),
        )
        .await;
    assert_eq!(
        imported.status,
        reqwest::StatusCode::CREATED,
        "{}",
        imported.text
    );
    let enabled = app
        .admin(
            reqwest::Method::PATCH,
            &format!("/admin/catalog/{entry}"),
            Some(json!({"enabled": true})),
        )
        .await;
    assert_eq!(enabled.status, reqwest::StatusCode::OK, "{}", enabled.text);
    let user = "catalog-user";
    app.create_server_ok(user, json!({"catalog": entry})).await;

    let output = run_console_script(
        &app,
        "catalog.test.mjs",
        &[
            ("CATALOG_USER", user.to_owned()),
            ("CATALOG_ENTRY", entry.to_owned()),
        ],
    )
    .await;
    let count = |label: &str| reported(&output, label);
    assert_eq!(count("tests"), Some(2), "{output}");
    assert_eq!(count("pass"), Some(2), "{output}");
    app.stop().await;
}

/// The Policies page at 1366 px and 390 px (`tests/console/policies.test.mjs`): a rule
/// that does not compile refused with its position, a draft tested on a sample call and
/// saved as a new version, and a user's quota use on their page.
#[tokio::test]
async fn an_operator_edits_tests_and_saves_policies_in_a_real_browser() {
    let app = spawn_pool_app().await;
    let user = "quota-user";
    let attributes = app
        .admin(
            reqwest::Method::PUT,
            &format!("/admin/users/{user}/attributes"),
            Some(json!({"groups": ["support"], "plan": "free"})),
        )
        .await;
    assert_eq!(
        attributes.status,
        reqwest::StatusCode::OK,
        "{}",
        attributes.text
    );
    let saved = app
        .admin(
            reqwest::Method::PUT,
            "/admin/policies",
            Some(json!({"rules": [], "quotas": [
                {"name": "daily", "when": "user.plan == \"free\"", "limit": 100, "window": "day"}
            ]})),
        )
        .await;
    assert_eq!(saved.status, reqwest::StatusCode::OK, "{}", saved.text);
    app.create_preset_ok(crate::upstreams::fixture_preset())
        .await;
    let server = app
        .create_server_ok(user, json!({"name": "fx", "preset": "fixture"}))
        .await;
    for _ in 0..2 {
        let called = app
            .call(user, &server, "add", json!({"a": 1, "b": 2}))
            .await;
        assert_eq!(called.status, reqwest::StatusCode::OK, "{}", called.text);
    }
    let output = run_console_script(
        &app,
        "policies.test.mjs",
        &[("QUOTA_USER", user.to_owned())],
    )
    .await;
    let count = |label: &str| reported(&output, label);
    assert_eq!(count("tests"), Some(2), "{output}");
    assert_eq!(count("pass"), Some(2), "{output}");
    // The phone's run saved last: the service enforces what the page saved.
    let refused = app.call(user, &server, "echo", json!({"text": "x"})).await;
    assert_eq!(refused.code(), "POLICY_DENIED", "{}", refused.text);
    app.stop().await;
}

/// A count node's spec reporter closes with (`ℹ tests N`, `ℹ pass N`).
fn reported(output: &str, label: &str) -> Option<u32> {
    output
        .lines()
        .find_map(|l| l.strip_prefix(&format!("ℹ {label} ")))
        .and_then(|n| n.trim().parse::<u32>().ok())
}

/// Runs `node --test tests/console/<script>` against `app` and returns its stdout (the
/// spec reporter's lines); panics with the whole stdout and stderr when it fails or
/// outlives [`SCRIPT_TIMEOUT`] (then it is killed, with its test processes).
///
/// The script sees `BASE_URL`, `ADMIN_KEY`, `SERVICE_KEY`, `SCREENSHOT_DIR`
/// (`target/console-screenshots`), `CHROMIUM` and `extra_env`.
pub async fn run_console_script(
    app: &TestApp,
    script: &str,
    extra_env: &[(&str, String)],
) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        root.join("tests/console/node_modules/playwright-core")
            .exists(),
        "playwright-core is not installed in tests/console: run tests/setup.sh \
         (it also installs Debian's chromium)"
    );
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run tests/setup.sh (it installs Debian's chromium)"
    );
    let mut child = Command::new("node")
        .current_dir(root)
        .args(["--test", "--test-reporter=spec"])
        .arg(Path::new("tests/console").join(script))
        .env("BASE_URL", &app.address)
        .env("ADMIN_KEY", ADMIN_KEY)
        .env("SERVICE_KEY", &app.service_key)
        .env("SCREENSHOT_DIR", root.join("target/console-screenshots"))
        .env("CHROMIUM", CHROMIUM)
        .env("NO_COLOR", "1")
        .envs(
            extra_env
                .iter()
                .map(|(name, value)| (*name, value.as_str())),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout ends node's per-file test processes too.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let stdout = collect(child.stdout.take().expect("piped stdout"));
    let stderr = collect(child.stderr.take().expect("piped stderr"));
    let status = match tokio::time::timeout(SCRIPT_TIMEOUT, child.wait()).await {
        Ok(status) => Some(status.expect("node is waited for")),
        Err(_) => {
            if let Some(pid) = child.id() {
                let pid = i32::try_from(pid).expect("a pid fits in i32");
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = child.kill().await;
            None
        }
    };
    // The pipes close when the last process holding them ends; give them a moment.
    let stdout = stdout.finish().await;
    let stderr = stderr.finish().await;
    match status {
        Some(status) if status.success() => stdout,
        Some(status) => panic!(
            "tests/console/{script} failed ({status}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        ),
        None => panic!(
            "tests/console/{script} did not finish within {} s and was killed:\n\
             --- stdout\n{stdout}\n--- stderr\n{stderr}",
            SCRIPT_TIMEOUT.as_secs()
        ),
    }
}

/// A pipe read to its end in the background; what arrived so far stays readable.
struct Collected {
    buffer: Arc<Mutex<Vec<u8>>>,
    reader: tokio::task::JoinHandle<()>,
}

fn collect(mut pipe: impl AsyncRead + Unpin + Send + 'static) -> Collected {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = buffer.clone();
    let reader = tokio::spawn(async move {
        let mut chunk = [0u8; 8192];
        while let Ok(read) = pipe.read(&mut chunk).await {
            if read == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..read]);
        }
    });
    Collected { buffer, reader }
}

impl Collected {
    /// The text read once the pipe has closed, or after 10 s with what has arrived.
    async fn finish(self) -> String {
        let mut reader = self.reader;
        if tokio::time::timeout(Duration::from_secs(10), &mut reader)
            .await
            .is_err()
        {
            reader.abort();
        }
        String::from_utf8_lossy(&self.buffer.lock().unwrap()).into_owned()
    }
}

/// The overview warns when stdio servers are not isolated (`tests/console/sandbox.test.mjs`):
/// a service whose bubblewrap cannot be found, at 1366 px and 390 px.
#[tokio::test]
async fn the_overview_says_when_stdio_servers_are_not_isolated() {
    let app = crate::helpers::spawn_pool_app_with(|s| {
        s.pool.sandbox.bwrap = "/nonexistent/bwrap".into();
    })
    .await;
    let output = run_console_script(&app, "sandbox.test.mjs", &[]).await;
    let count = |label: &str| reported(&output, label);
    assert_eq!(count("tests"), Some(2), "{output}");
    assert_eq!(count("pass"), Some(2), "{output}");
    app.stop().await;
}
