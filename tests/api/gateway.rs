//! The gateway: an assistant's servers as one MCP endpoint, used by real MCP clients.

use std::time::Duration;

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

use crate::helpers::{TestApp, jsonrpc_answer, spawn_pool_app_with};
use crate::upstreams::{everything_preset, fixture_preset};

/// User `u`, assistant `a1` bound to the stdio fixture `fx` (echo and crash auto-approved,
/// add not) and server-everything `every` (echo auto-approved); returns a gateway token.
pub async fn gateway_app() -> (TestApp, String) {
    gateway_app_with(|_| {}).await
}

pub async fn gateway_app_with(adjust: impl FnOnce(&mut mcp_pool::Settings)) -> (TestApp, String) {
    let app = spawn_pool_app_with(adjust).await;
    app.create_preset_ok(fixture_preset()).await;
    app.create_preset_ok(everything_preset()).await;
    let fx = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "fixture", "autoApproveTools": ["echo", "crash", "progress"]}),
        )
        .await;
    let every = app
        .create_server_ok(
            "u",
            json!({"name": "every", "preset": "everything", "autoApproveTools": ["echo"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&fx, &every]).await;
    let created = app
        .user(
            "u",
            Method::POST,
            "/api/assistants/a1/gateway-tokens",
            Some(json!({"name": "desktop"})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let token = created.body["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("mcpg_"));
    assert_eq!(created.body["endpoint"], "/mcp/assistants/a1");
    (app, token)
}

pub async fn connect(
    app: &TestApp,
    assistant: &str,
    token: &str,
) -> RunningService<rmcp::RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_config(
        app.gateway_client_config(assistant, token),
    ))
    .await
    .expect("the gateway accepts an MCP client")
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

#[tokio::test]
async fn an_mcp_client_sees_namespaced_tools_of_both_upstreams_and_calls_them() {
    let (app, token) = gateway_app().await;
    let client = connect(&app, "a1", &token).await;
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "mcp-pool gateway");

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in ["fx__echo", "fx__add", "every__echo", "every__get-sum"] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let echo = client
        .call_tool(call("fx__echo", json!({"text": "through the gateway"})))
        .await
        .unwrap();
    assert_eq!(text(&echo), "through the gateway");
    let other = client
        .call_tool(call("every__echo", json!({"message": "hi"})))
        .await
        .unwrap();
    assert!(text(&other).contains("hi"), "{other:?}");

    // Unknown tools and bad arguments are the client's mistakes.
    let unknown = client
        .call_tool(call("fx__nope", json!({})))
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("fx__nope"), "{unknown}");
    let invalid = client
        .call_tool(call("fx__echo", json!({"text": 5})))
        .await
        .unwrap_err();
    assert!(invalid.to_string().contains("input schema"), "{invalid}");

    // Resources and prompts of the upstreams come through too.
    let prompts = client.list_all_prompts().await.unwrap();
    assert!(prompts.iter().any(|p| p.name == "fx__greet"), "{prompts:?}");
    let resources = client.list_all_resources().await.unwrap();
    let greeting = resources
        .iter()
        .find(|r| r.uri == "fixture://greeting")
        .expect("fixture resource");
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            greeting.uri.clone(),
        ))
        .await
        .unwrap();
    assert!(!read.contents.is_empty());
    client.cancel().await.unwrap();
}

/// `user`'s event stream, as server-sent events.
pub(crate) async fn user_events(
    app: &TestApp,
    user: &str,
) -> impl futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Unpin {
    let events = app
        .request(Method::GET, "/api/events")
        .bearer_auth(&app.service_key)
        .header("X-User-Id", user)
        .send()
        .await
        .unwrap();
    sse_stream::SseStream::from_bytes_stream(events.bytes_stream())
}

/// The next call parked for approval that `events` announce (its event's data).
pub(crate) async fn next_pending(
    events: &mut (impl futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Unpin),
) -> Value {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("an event")
            .unwrap()
            .unwrap();
        let Some(data) = event.data else { continue };
        let data: Value = serde_json::from_str(&data).unwrap();
        if data["toolCall"]["status"] == "pending" {
            return data;
        }
    }
}

#[tokio::test]
async fn a_call_that_needs_approval_waits_for_the_user() {
    let (app, token) = gateway_app().await;
    let mut events = user_events(&app, "u").await;
    let client = connect(&app, "a1", &token).await;
    let peer = client.peer().clone();
    let parked = tokio::spawn(async move {
        peer.call_tool(call("fx__add", json!({"a": 1, "b": 2})))
            .await
    });

    let pending = next_pending(&mut events).await;
    assert!(!parked.is_finished(), "the call waits for the decision");
    let message = pending["messageId"].as_str().unwrap();
    app.confirm_ok(message, pending["toolCall"]["id"].as_str().unwrap(), true)
        .await;
    let result = parked.await.unwrap().unwrap();
    assert_eq!(text(&result), "3");
    assert_ne!(result.is_error, Some(true));
}

#[tokio::test]
async fn one_upstream_crashing_leaves_the_other_working() {
    let (app, token) = gateway_app().await;
    let client = connect(&app, "a1", &token).await;
    let crashed = client.call_tool(call("fx__crash", json!({}))).await;
    // The fixture exits mid-call: a tool error the model can read, not a broken session.
    let crashed = crashed.expect("the gateway answers even when an upstream dies");
    assert_eq!(crashed.is_error, Some(true), "{crashed:?}");
    let other = client
        .call_tool(call("every__echo", json!({"message": "still here"})))
        .await
        .unwrap();
    assert!(text(&other).contains("still here"));
    // The crashed server comes back on next use.
    let again = client
        .call_tool(call("fx__echo", json!({"text": "back"})))
        .await
        .unwrap();
    assert_eq!(text(&again), "back");
}

/// A client that records the notifications it gets.
#[derive(Clone, Default)]
struct Recorder {
    progress: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    list_changes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.progress
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }

    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.list_changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn progress_is_relayed_and_list_changes_are_announced() {
    let (app, token) = gateway_app().await;
    let recorder = Recorder::default();
    let config = app.gateway_client_config("a1", &token);
    let client = recorder
        .clone()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let progress = tools
        .iter()
        .find(|t| t.name == "fx__progress")
        .expect("fx__progress");
    assert!(progress.input_schema.contains_key("properties"));
    let result = client
        .call_tool(call("fx__progress", json!({"steps": 3, "delayMs": 10})))
        .await
        .unwrap();
    assert!(text(&result).contains("3 steps"), "{result:?}");
    // rmcp hands each notification to its own task, so the last may be recorded just after
    // the result arrives.
    crate::upstreams::eventually("three progress notifications are recorded", || async {
        recorder.progress.lock().unwrap().len() >= 3
    })
    .await;
    assert_eq!(
        *recorder.progress.lock().unwrap(),
        vec!["step 1", "step 2", "step 3"],
        "each upstream progress notification reached the client"
    );
    // An admin refresh drops the caches; the gateway tells the client to list again, and
    // the list still holds every tool.
    let servers = app.user("u", Method::GET, "/api/mcp-servers", None).await;
    let fx = servers.body["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "fx")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refreshed = app
        .admin(
            Method::POST,
            &format!("/admin/connections/u/{fx}/refresh"),
            None,
        )
        .await;
    assert_eq!(refreshed.status, StatusCode::OK, "{}", refreshed.text);
    crate::upstreams::eventually("the client is told to list again", || async {
        recorder
            .list_changes
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
    })
    .await;
    assert_eq!(client.list_all_tools().await.unwrap().len(), tools.len());
}

#[tokio::test]
async fn the_gateway_refuses_requests_without_the_assistants_token() {
    let (app, token) = gateway_app().await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}},
    });
    let post = |path: &str, bearer: Option<&str>| {
        let mut request = app
            .request(Method::POST, path)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        request
    };
    let none = app.send_raw(post("/mcp/assistants/a1", None)).await;
    assert_eq!(
        (none.status, none.code()),
        (StatusCode::UNAUTHORIZED, "UNAUTHORIZED")
    );
    let wrong = app
        .send_raw(post("/mcp/assistants/a1", Some("mcpg_not-a-token")))
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let service_key = app
        .send_raw(post("/mcp/assistants/a1", Some(&app.service_key.clone())))
        .await;
    assert_eq!(
        service_key.status,
        StatusCode::UNAUTHORIZED,
        "API keys are not gateway tokens"
    );
    let other = app.send_raw(post("/mcp/assistants/a2", Some(&token))).await;
    assert_eq!(
        (other.status, other.code()),
        (StatusCode::FORBIDDEN, "FORBIDDEN")
    );

    // Listed without the secret; deleted tokens stop working at once.
    let listed = app
        .user("u", Method::GET, "/api/assistants/a1/gateway-tokens", None)
        .await;
    let tokens = listed.body["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 1);
    assert!(tokens[0].get("token").is_none());
    assert!(token.starts_with(tokens[0]["prefix"].as_str().unwrap()));
    let id = tokens[0]["id"].as_str().unwrap();
    let gone = app
        .user(
            "v",
            Method::DELETE,
            &format!("/api/assistants/a1/gateway-tokens/{id}"),
            None,
        )
        .await;
    assert_eq!(
        gone.code(),
        "GATEWAY_TOKEN_NOT_FOUND",
        "another user cannot delete it"
    );
    let deleted = app
        .user(
            "u",
            Method::DELETE,
            &format!("/api/assistants/a1/gateway-tokens/{id}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let revoked = app.send_raw(post("/mcp/assistants/a1", Some(&token))).await;
    assert_eq!(revoked.status, StatusCode::UNAUTHORIZED);
}

/// The reference Python SDK's interpreter, installed by .ci/run into tests/clients/.venv.
pub(crate) fn python_sdk() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "the Python MCP SDK is not installed: run `python3 -m venv tests/clients/.venv && \
         tests/clients/.venv/bin/pip install -r tests/clients/requirements.txt` (or .ci/run)"
    );
    python
}

#[tokio::test]
async fn the_python_sdk_client_lists_and_calls_through_the_gateway() {
    let (app, token) = gateway_app().await;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/gateway_client.py");
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(python_sdk())
            .arg(script)
            .arg(format!("{}/mcp/assistants/a1", app.address))
            .arg(&token)
            .output(),
    )
    .await
    .expect("the Python client finishes within 60 s")
    .unwrap();
    assert!(
        output.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen["server"], "mcp-pool gateway");
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"fx__echo") && tools.contains(&"every__get-sum"),
        "{tools:?}"
    );
    assert_eq!(seen["echo"], "from python");
    assert!(
        seen["other"].as_str().unwrap().contains("python says hi"),
        "{seen}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("Session termination failed"),
        "the session ended cleanly: {stderr}"
    );
}

/// A session ends with everything it started (the task relaying list changes to it), and
/// a DELETE of a session the gateway does not hold answers 404.
#[tokio::test]
async fn a_sessions_tasks_end_with_it_and_unknown_sessions_answer_404() {
    let (app, token) = gateway_app().await;
    sessions_end(app, token, true).await;
}

#[tokio::test]
async fn a_session_left_idle_ends_with_its_tasks() {
    let (app, token) = gateway_app_with(|s| s.gateway.session_idle_secs = 1).await;
    sessions_end(app, token, false).await;
}

/// The gateway spoken by hand: JSON-RPC posted as a client without an SDK would.
struct RawGateway {
    client: reqwest::Client,
    url: String,
    token: String,
}

impl RawGateway {
    fn new(client: reqwest::Client, app: &TestApp, token: &str) -> Self {
        Self {
            client,
            url: format!("{}/mcp/assistants/a1", app.address),
            token: token.to_owned(),
        }
    }

    /// A request to the endpoint with the token, and in `session` when one is given.
    fn request(&self, method: Method, session: Option<&str>) -> reqwest::RequestBuilder {
        let request = self
            .client
            .request(method, &self.url)
            .bearer_auth(&self.token);
        match session {
            Some(session) => request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-06-18"),
            None => request,
        }
    }

    async fn post(&self, session: Option<&str>, body: Value) -> reqwest::Response {
        self.request(Method::POST, session)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Initializes a 2025-06-18 session: its id.
    async fn open(&self) -> String {
        let initialized = self
            .post(
                None,
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .await;
        let session = initialized.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        initialized.bytes().await.unwrap();
        let ack = self
            .post(
                Some(&session),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(ack.status(), StatusCode::ACCEPTED);
        session
    }
}

/// A service with the fixture bound to user `u`'s assistant `a1` (`auto_approve` run at
/// once) and a gateway session open on it: the app (keep it), the gateway, the session.
async fn open_gateway_session(auto_approve: &[&str]) -> (TestApp, RawGateway, String) {
    let app = spawn_pool_app_with(|_| {}).await;
    app.fixture_for_a1(auto_approve).await;
    let token = app.gateway_token("u", "a1").await;
    let gateway = RawGateway::new(reqwest::Client::new(), &app, &token);
    let session = gateway.open().await;
    (app, gateway, session)
}

/// Opens 30 sessions and sees their tasks go: after DELETE (`delete`) or idle expiry.
async fn sessions_end(app: TestApp, token: String, delete_them: bool) {
    // No kept-alive connections: their tasks would blur the count.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let gateway = RawGateway::new(client, &app, &token);
    let open = || gateway.open();
    let delete = |session: String| {
        let gateway = &gateway;
        async move { gateway.request(Method::DELETE, Some(&session)).send().await }
    };
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };

    let warm = open().await;
    assert_eq!(delete(warm).await.unwrap().status(), StatusCode::NO_CONTENT);
    let baseline = alive();
    let sessions = futures::future::join_all((0..30).map(|_| open())).await;
    assert!(alive() >= baseline + 30, "each session holds tasks");
    if !delete_them {
        crate::upstreams::eventually("the idle sessions' tasks are gone", || async {
            alive() <= baseline + 3
        })
        .await;
        let expired = delete(sessions[0].clone()).await.unwrap();
        assert_eq!(
            expired.status(),
            StatusCode::NOT_FOUND,
            "an expired session is gone"
        );
        return;
    }
    for session in &sessions {
        let deleted = delete(session.clone()).await.unwrap();
        assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    }
    crate::upstreams::eventually("the deleted sessions' tasks are gone", || async {
        alive() <= baseline + 3
    })
    .await;

    let again = delete(sessions[0].clone()).await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
    let unknown = delete("no-such-session".into()).await.unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["code"], "GATEWAY_SESSION_NOT_FOUND", "{body}");
}

#[tokio::test]
async fn the_cached_tool_view_follows_server_and_binding_changes() {
    let (app, token) = gateway_app().await;
    let client = connect(&app, "a1", &token).await;
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.to_string()).collect()
    };
    let before = names(client.list_all_tools().await.unwrap());
    assert!(before.contains(&"fx__echo".to_owned()), "{before:?}");
    assert!(
        before.iter().any(|n| n.starts_with("every__")),
        "{before:?}"
    );
    // Twice the same: the second comes from the cached view.
    assert_eq!(names(client.list_all_tools().await.unwrap()), before);

    let servers = app.user("u", Method::GET, "/api/mcp-servers", None).await;
    let fx = servers.body["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "fx")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let updated = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{fx}"),
            Some(json!({"disabledTools": ["echo"]})),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.text);
    let after_update = names(client.list_all_tools().await.unwrap());
    assert!(
        !after_update.contains(&"fx__echo".to_owned()),
        "{after_update:?}"
    );
    assert!(
        after_update.contains(&"fx__add".to_owned()),
        "{after_update:?}"
    );

    app.bind_ok("u", "a1", [&fx]).await;
    let after_unbind = names(client.list_all_tools().await.unwrap());
    assert!(
        !after_unbind.iter().any(|n| n.starts_with("every__")),
        "{after_unbind:?}"
    );
    let result = client
        .call_tool(call("every__echo", json!({"message": "x"})))
        .await;
    assert!(
        result.is_err(),
        "an unbound server's tool is not callable: {result:?}"
    );
}

#[tokio::test]
async fn each_prefix_mode_names_tools_and_an_assistant_can_choose_its_own() {
    let (app, token) = gateway_app().await;
    let client = connect(&app, "a1", &token).await;
    let names = || async {
        let tools = client.list_all_tools().await.unwrap();
        tools
            .into_iter()
            .map(|t| t.name.to_string())
            .collect::<Vec<_>>()
    };
    let settings = |prefix: Value| {
        let app = &app;
        async move {
            app.user(
                "u",
                Method::PUT,
                "/api/assistants/a1/gateway",
                Some(json!({"prefix": prefix})),
            )
            .await
        }
    };
    // The default: always prefixed.
    let always = names().await;
    assert!(
        always
            .iter()
            .all(|n| n.starts_with("fx__") || n.starts_with("every__")),
        "{always:?}"
    );
    let pairs: Vec<(&str, &str)> = always.iter().map(|n| n.split_once("__").unwrap()).collect();
    let shared = |tool: &str| pairs.iter().filter(|(_, t)| *t == tool).count() > 1;
    assert!(shared("echo"), "both servers offer echo: {always:?}");

    let set = settings(json!("on_collision")).await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    assert_eq!(set.body["prefix"], "on_collision");
    assert_eq!(set.body["effectivePrefix"], "on_collision");
    let expected: Vec<String> = pairs
        .iter()
        .map(|(server, tool)| {
            if shared(tool) {
                format!("{server}__{tool}")
            } else {
                (*tool).to_owned()
            }
        })
        .collect();
    assert_eq!(names().await, expected);

    let set = settings(json!("never")).await;
    assert_eq!(
        set.body["hiddenTools"],
        json!([{"serverName": "every", "tool": "echo"}]),
        "{}",
        set.text
    );
    let never = names().await;
    assert_eq!(
        never.iter().filter(|n| *n == "echo").count(),
        1,
        "{never:?}"
    );
    assert!(never.iter().all(|n| !n.contains('.')), "{never:?}");
    // The first bound server's echo answers.
    let result = client
        .call_tool(call("echo", json!({"text": "from fx"})))
        .await
        .unwrap();
    assert_eq!(text(&result), "from fx");

    let bad = settings(json!("sometimes")).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
    let cleared = settings(Value::Null).await;
    assert_eq!(cleared.body["prefix"], Value::Null, "{}", cleared.text);
    assert_eq!(cleared.body["effectivePrefix"], "always");
    assert_eq!(names().await, always);
    // Another user cannot see or change this assistant's settings: theirs are their own.
    let other = app
        .user("mallory", Method::GET, "/api/assistants/a1/gateway", None)
        .await;
    assert_eq!(other.body["effectivePrefix"], "always", "{}", other.text);
    assert_eq!(other.body["hiddenTools"], json!([]));
}

/// A client of the newest revision: no initialize, no session.
#[derive(Clone)]
struct Sessionless;

impl rmcp::ClientHandler for Sessionless {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2026-07-28",
            "capabilities": {},
            "clientInfo": {"name": "sessionless", "version": "1"}
        }))
        .unwrap()
    }
}

#[tokio::test]
async fn a_sessionless_2026_07_28_client_lists_and_calls_through_the_gateway() {
    let (app, token) = gateway_app().await;
    let config = app.gateway_client_config("a1", &token);
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let client = Sessionless
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("the gateway serves a 2026-07-28 client");
    assert_eq!(
        client
            .peer_info()
            .map(|info| info.protocol_version.to_string()),
        Some("2026-07-28".to_owned())
    );
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "fx__echo"), "{tools:?}");
    let result = client
        .call_tool(call("fx__echo", json!({"text": "no session"})))
        .await
        .unwrap();
    assert_eq!(text(&result), "no session");
}

/// A client of the newest revision that can answer questions (so its calls run in rounds).
#[derive(Clone)]
struct AnsweringSessionless(std::sync::Arc<std::sync::Mutex<Vec<f64>>>);

impl rmcp::ClientHandler for AnsweringSessionless {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2026-07-28",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "answering", "version": "1"}
        }))
        .unwrap()
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.lock().unwrap().push(params.progress);
    }
}

/// Such a client's call reports its progress as any other's (it got none when it declared
/// it could answer questions).
#[tokio::test]
async fn a_2026_07_28_client_that_can_answer_questions_gets_the_calls_progress() {
    let (app, token) = gateway_app().await;
    let config = app.gateway_client_config("a1", &token);
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = AnsweringSessionless(seen.clone())
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("the gateway serves a 2026-07-28 client");
    let result = client
        .call_tool(call("fx__progress", json!({"steps": 3, "delayMs": 20})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    // Notifications are handled in tasks of their own: the last may follow the result.
    for _ in 0..50 {
        if seen.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*seen.lock().unwrap(), vec![1.0, 2.0, 3.0]);
}

/// A session's idle timer counts from its last message: a session in steady use outlives
/// it, and one left alone still ends.
#[tokio::test]
async fn a_session_in_use_outlives_its_idle_timeout() {
    let (app, token) = gateway_app_with(|s| s.gateway.session_idle_secs = 1).await;
    // No silent re-initialization: an ended session must show as an error here.
    let config = app
        .gateway_client_config("a1", &token)
        .reinit_on_expired_session(false);
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    for round in 0..8 {
        let result = client
            .call_tool(call("fx__echo", json!({"text": format!("round {round}")})))
            .await
            .expect("a session in use is kept");
        assert_eq!(text(&result), format!("round {round}"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        client
            .call_tool(call("fx__echo", json!({"text": "late"})))
            .await
            .is_err(),
        "a session left idle past its timeout ends"
    );
}

/// A call that takes a while has its answer's stream primed (an event id to resume from)
/// while it runs: a client whose connection drops mid-call resumes with `Last-Event-ID`
/// and still gets the answer.
#[tokio::test]
async fn a_slow_calls_stream_is_primed_while_it_runs_and_resumes_after_a_drop() {
    let (_app, gateway, session) = open_gateway_session(&["slow"]).await;

    let call = gateway
        .post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "fx__slow", "arguments": {"ms": 1500}}}),
        )
        .await;
    assert_eq!(call.status(), StatusCode::OK);
    assert_eq!(call.headers()["content-type"], "text/event-stream");
    let mut body = call.bytes_stream();
    let mut received = String::new();
    while !received.contains("\n\n") {
        let chunk = body
            .next()
            .await
            .expect("the stream sends an event")
            .unwrap();
        received.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let first = received.split("\n\n").next().unwrap().to_owned();
    assert!(
        !first.contains("slept"),
        "the stream is primed before the call ends: {first:?}"
    );
    let event_id = first
        .lines()
        .find_map(|line| line.strip_prefix("id:"))
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|| panic!("the priming event has an id: {first:?}"));
    drop(body);

    let resumed = gateway
        .request(Method::GET, Some(&session))
        .header("accept", "text/event-stream")
        .header("last-event-id", &event_id)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    let replayed = resumed.text().await.unwrap();
    assert!(
        replayed.contains("slept 1500 ms") && replayed.contains(r#""id":7"#),
        "the resumed stream carries the answer: {replayed}"
    );
}

/// Each JSON-RPC message is told by its members: a request is answered on its stream, a
/// notification, a response and an error are accepted without one, and a message that
/// is none of them cleanly (a request carrying a `result`, a response with an `error`
/// too, the wrong `jsonrpc`, a null request id) is refused whole, never half read: 400
/// with a JSON-RPC error, -32600 for no message, -32700 for no JSON.
#[tokio::test]
async fn the_gateway_tells_each_json_rpc_message_by_its_members() {
    let (_app, gateway, session) = open_gateway_session(&["echo"]).await;

    let ping = gateway
        .post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": "p", "method": "ping"}),
        )
        .await;
    assert_eq!(ping.status(), StatusCode::OK);
    assert_eq!(
        jsonrpc_answer(ping, "p").await,
        json!({"jsonrpc": "2.0", "id": "p", "result": {}})
    );
    let call = gateway
        .post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "fx__echo", "arguments": {"text": "hé 😀"}}}),
        )
        .await;
    let called = jsonrpc_answer(call, 2).await;
    assert_eq!(called["id"], 2);
    assert_eq!(called["result"]["content"][0]["text"], "hé 😀");

    for accepted in [
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 99}}),
        json!({"jsonrpc": "2.0", "id": 16, "result": {}}),
        json!({"jsonrpc": "2.0", "error": {"code": -1, "message": "m"}}),
    ] {
        let response = gateway.post(Some(&session), accepted.clone()).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{accepted}");
    }
    for refused in [
        json!({"jsonrpc": "2.0", "id": 14, "method": "ping", "result": {}}),
        json!({"jsonrpc": "2.0", "id": 15, "method": "ping", "error": {"code": 1, "message": "x"}}),
        json!({"jsonrpc": "2.0", "id": 19, "result": {}, "error": {"code": 1, "message": "x"}}),
        json!({"jsonrpc": "1.0", "id": 12, "method": "ping"}),
        json!({"id": 13, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
        json!({"jsonrpc": "2.0", "method": 7, "id": 9}),
        json!([{"jsonrpc": "2.0", "id": 23, "method": "ping"}]),
    ] {
        let response = gateway.post(Some(&session), refused.clone()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{refused}");
        let error = jsonrpc_answer(response, Value::Null).await;
        assert_eq!(error["error"]["code"], -32600, "{refused}: {error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("unrecognized JSON-RPC message")),
            "{refused} is refused as no JSON-RPC message: {error}"
        );
    }
    // Not JSON at all: a parse error, in JSON-RPC's words.
    for broken in ["not json", r#"{"jsonrpc":"2.0","id":40,"method":"ping""#] {
        let response = gateway
            .request(Method::POST, Some(&session))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(broken)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{broken}");
        let error = jsonrpc_answer(response, Value::Null).await;
        assert_eq!(error["error"]["code"], -32700, "{broken}: {error}");
        assert_eq!(error["id"], Value::Null, "{broken}: {error}");
    }
}

/// A request of a method MCP defines, with params that do not fit it, is answered
/// "invalid params" (-32602) with the reason; a method nobody defines stays "method not
/// found" (-32601). rmcp answered both -32601, naming only the method.
#[tokio::test]
async fn malformed_params_of_a_known_method_are_invalid_params_not_an_unknown_method() {
    let (_app, gateway, session) = open_gateway_session(&[]).await;

    for (request, reason) in [
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"arguments": {}}}),
            "name",
        ),
        (
            json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                "params": {"uri": 5}}),
            "invalid type",
        ),
        (
            json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get"}),
            "params are required",
        ),
        (
            json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel",
                "params": {"level": "loudest"}}),
            "loudest",
        ),
    ] {
        let response = gateway.post(Some(&session), request.clone()).await;
        let error = jsonrpc_answer(response, request["id"].clone()).await["error"].clone();
        assert_eq!(error["code"], -32602, "{request}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "invalid params for {}",
                request["method"].as_str().unwrap()
            )) && message.contains(reason),
            "{request}: {message}"
        );
    }
    let unknown = gateway
        .post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 4, "method": "no/such"}),
        )
        .await;
    let error = jsonrpc_answer(unknown, 4).await["error"].clone();
    assert_eq!(error["code"], -32601, "{error}");
    assert_eq!(error["message"], "no/such");
}

/// A call answered at once, nothing sent before its answer, comes back as one JSON body;
/// a call that sends progress first still streams, progress and answer in order, nothing
/// lost. (How fast "at once" is depends on the machine: the first call, which connects the
/// server, streams; of the calls after it at least one is quick enough.)
#[tokio::test]
async fn a_quick_answer_is_one_json_body_and_a_call_with_progress_still_streams() {
    let (_app, gateway, session) = open_gateway_session(&["echo", "progress"]).await;

    let mut as_json = 0;
    for id in 1..=50 {
        let echo = gateway
            .post(
                Some(&session),
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "fx__echo", "arguments": {"text": format!("quick {id}")}}}),
            )
            .await;
        assert_eq!(echo.status(), StatusCode::OK);
        let content_type = echo.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(
            ["application/json", "text/event-stream"].contains(&content_type.as_str()),
            "{content_type}"
        );
        as_json += usize::from(content_type == "application/json");
        let answer = jsonrpc_answer(echo, id).await;
        assert_eq!(answer["id"], id);
        assert_eq!(
            answer["result"]["content"][0]["text"],
            format!("quick {id}")
        );
        if as_json > 0 && id > 1 {
            break;
        }
    }
    assert!(as_json > 0, "a quick call's answer comes as one JSON body");

    let progress = gateway
        .post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 100, "method": "tools/call",
                "params": {"name": "fx__progress", "arguments": {"steps": 3, "delayMs": 0},
                    "_meta": {"progressToken": "p2"}}}),
        )
        .await;
    assert_eq!(progress.status(), StatusCode::OK);
    assert_eq!(progress.headers()["content-type"], "text/event-stream");
    let body = progress.text().await.unwrap();
    let messages: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .filter(|data| !data.is_empty())
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let steps: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| &m["params"]["progress"])
        .collect();
    assert_eq!(steps, [1.0, 2.0, 3.0], "{body}");
    let last = messages.last().unwrap();
    assert_eq!(last["id"], 100, "the answer comes last: {body}");
    assert_eq!(last["result"]["content"][0]["text"], "done after 3 steps");
}

/// Tool names a client library hands to a model unchanged must be names every major model
/// API accepts as a function name (OpenAI `^[a-zA-Z0-9_-]+$`, Anthropic
/// `^[a-zA-Z0-9_-]{1,64}$`): the default separator keeps them so, however the server is
/// named, and a name cut to 64 characters still calls its tool.
#[tokio::test]
async fn gateway_tool_names_are_function_names_every_model_api_accepts() {
    let app = spawn_pool_app_with(|_| {}).await;
    app.create_preset_ok(fixture_preset()).await;
    let long_name = "Team.Tools: the fixture server with a name far longer than usual";
    let fx = app
        .create_server_ok(
            "u",
            json!({"name": long_name, "preset": "fixture", "autoApproveTools": ["echo"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&fx]).await;
    let client = connect(&app, "a1", &app.gateway_token("u", "a1").await).await;
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(!names.is_empty());
    for name in &names {
        assert!(
            (1..=64).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{name:?} is no function name a model API accepts: {names:?}"
        );
    }
    // The fixture lists echo first; every name here is cut, so echo's is the first.
    let echo = &names[0];
    assert!(
        echo.starts_with("Team_Tools__the_fixture") && echo.len() == 64,
        "a long name is cut to 64: {names:?}"
    );
    let result = client
        .call_tool(call(echo, json!({"text": "by its cut name"})))
        .await
        .unwrap();
    // Which tool a cut name stands for is looked up, never read off the name.
    assert_eq!(text(&result), "by its cut name", "{result:?}");
    client.cancel().await.unwrap();
}
