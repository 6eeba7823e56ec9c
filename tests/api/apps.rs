//! MCP Apps (the `io.modelcontextprotocol/ui` extension) through the pool (issue 41, §1):
//! real servers written with the official ext-apps SDK (`tests/apps/board_server.mjs`, and
//! the SDK's published example `@modelcontextprotocol/server-basic-vanillajs`) behind REST
//! and the gateway. Views and their metadata reach hosts unchanged (namespaced per server
//! on the gateway), app-only tools never reach a model, and a view's call goes through the
//! same door as any other: approval, audit (marked as the app's), and only to its own
//! server's tools.

use std::path::PathBuf;

use reqwest::{Method, StatusCode};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ReadResourceRequestParams, RequestMetaObject,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

use crate::gateway::{next_pending, user_events};
use crate::helpers::{Reply, TestApp, spawn_pool_app};

const BOARD_VIEW: &str = "ui://board/view.html";
const BASIC_VIEW: &str = "ui://get-time/mcp-app.html";
const APP_MIME: &str = "text/html;profile=mcp-app";
const UI: &str = "io.modelcontextprotocol/ui";

pub fn apps_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/apps");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/ext-apps")
            .exists(),
        "the ext-apps SDK is not installed: run `npm ci --prefix tests/apps` (or tests/setup.sh)"
    );
    dir
}

/// User `u` with `board` (show-board auto-approved, move-card not) and `basic` (get-time
/// auto-approved), both bound to assistant `a1`: the app and the servers' ids.
async fn apps_app() -> (TestApp, String, String) {
    let app = spawn_pool_app().await;
    let dir = apps_dir();
    app.create_preset_ok(json!({
        "name": "board",
        "command": "node",
        "args": [dir.join("board_server.mjs").display().to_string()],
    }))
    .await;
    app.create_preset_ok(json!({
        "name": "basic-app",
        "command": "node",
        "args": [
            dir.join("node_modules/@modelcontextprotocol/server-basic-vanillajs/dist/index.js")
                .display()
                .to_string(),
            "--stdio"
        ],
    }))
    .await;
    let board = app
        .create_server_ok(
            "u",
            json!({"name": "board", "preset": "board", "autoApproveTools": ["show-board", "count-cards"]}),
        )
        .await;
    let basic = app
        .create_server_ok(
            "u",
            json!({"name": "basic", "preset": "basic-app", "autoApproveTools": ["get-time"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&board, &basic]).await;
    (app, board, basic)
}

async fn app_call(app: &TestApp, server: &str, tool: &str, arguments: Value, view: &str) -> Reply {
    app.user(
        "u",
        Method::POST,
        &format!("/api/mcp-servers/{server}/tools/{tool}/call"),
        Some(json!({"arguments": arguments, "app": {"resourceUri": view}})),
    )
    .await
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

/// A 403 with `code` whose message says `words`, in words (no type path).
fn assert_refused(reply: &Reply, code: &str, words: &str) {
    assert_eq!(
        (reply.status, reply.code()),
        (StatusCode::FORBIDDEN, code),
        "{}",
        reply.text
    );
    assert!(reply.text.contains(words), "{}", reply.text);
    assert!(!reply.text.contains("::"), "{}", reply.text);
}

/// A gateway call's error result that says each of `words` (the model or view reads it).
fn assert_error_result(result: &CallToolResult, words: &[&str]) {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    for word in words {
        assert!(text(result).contains(word), "{word} in {result:?}");
    }
}

/// User `u`'s audit rows of `tool`, newest first.
async fn audit_rows(app: &TestApp, tool: &str) -> Vec<Value> {
    let page = app
        .admin(
            Method::GET,
            &format!("/admin/audit?userId=u&tool={tool}&pageSize=200"),
            None,
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    page.body["entries"].as_array().unwrap().clone()
}

#[tokio::test]
async fn rest_hosts_get_views_as_declared_and_models_never_see_app_only_tools() {
    let (app, board, basic) = apps_app().await;

    // The server's own listing: every tool with its `_meta` as the server wrote it.
    let listed = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{board}/tools"),
            None,
        )
        .await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
    let move_card = listed.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "move-card")
        .expect("move-card listed for its host");
    assert_eq!(
        move_card["_meta"]["ui"],
        json!({"resourceUri": BOARD_VIEW, "visibility": ["app"]})
    );

    // Every model format: no app-only tool; each view by the name the model calls.
    for format in ["openai", "anthropic", "mcp"] {
        let tools = app
            .user(
                "u",
                Method::GET,
                &format!("/api/assistants/a1/tools?format={format}"),
                None,
            )
            .await;
        assert_eq!(tools.status, StatusCode::OK, "{}", tools.text);
        let names: Vec<String> = tools.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                t["function"]["name"]
                    .as_str()
                    .or(t["name"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert!(
            !names.iter().any(|n| n.contains("move-card")),
            "{format}: {names:?}"
        );
        for expected in [
            "mcp__board__show-board",
            "mcp__board__count-cards",
            "mcp__basic__get-time",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{format}: {expected} in {names:?}"
            );
        }
        assert_eq!(
            tools.body["apps"]["mcp__board__show-board"],
            json!({"serverId": board, "resourceUri": BOARD_VIEW, "visibility": ["model", "app"]}),
            "{format}: {}",
            tools.body
        );
        assert_eq!(
            tools.body["apps"]["mcp__basic__get-time"]["resourceUri"],
            BASIC_VIEW
        );
        assert!(
            tools.body["apps"].get("mcp__board__count-cards").is_none(),
            "a tool without a view has no app entry: {}",
            tools.body["apps"]
        );
    }

    // The view: its HTML with the metadata unchanged, listed and read.
    let resources = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{board}/resources"),
            None,
        )
        .await;
    let view = resources.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == BOARD_VIEW)
        .expect("the view is listed")
        .clone();
    assert_eq!(view["mimeType"], APP_MIME);
    let csp = json!({
        "csp": {"connectDomains": ["https://api.board.example"], "resourceDomains": ["https://cdn.board.example"]},
        "permissions": {"clipboardWrite": {}},
        "prefersBorder": true
    });
    assert_eq!(view["_meta"]["ui"], csp);
    let read = app
        .user(
            "u",
            Method::POST,
            &format!("/api/mcp-servers/{board}/resources/read"),
            Some(json!({"uri": BOARD_VIEW})),
        )
        .await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    let contents = &read.body["contents"][0];
    assert_eq!(contents["mimeType"], APP_MIME);
    assert!(
        contents["text"]
            .as_str()
            .unwrap()
            .contains("<h1>Board</h1>")
    );
    assert_eq!(contents["_meta"]["ui"], csp);

    // A result says which view renders it.
    let shown = app.call("u", &board, "show-board", json!({})).await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.text);
    assert_eq!(shown.body["ui"], json!({"resourceUri": BOARD_VIEW}));
    let counted = app.call("u", &board, "count-cards", json!({})).await;
    assert!(counted.body.get("ui").is_none(), "{}", counted.text);

    // The app-only tool: refused to anyone but its view, which its host relays.
    let direct = app
        .call(
            "u",
            &board,
            "move-card",
            json!({"card": "c1", "to": "done"}),
        )
        .await;
    assert_refused(&direct, "APP_CALL_REFUSED", "only for its server's view");
    let moved = app_call(
        &app,
        &board,
        "move-card",
        json!({"card": "c1", "to": "done"}),
        BOARD_VIEW,
    )
    .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text);
    assert!(
        moved.text.contains("moved c1 to done (move 1)"),
        "{}",
        moved.text
    );

    // A view calls no model-only tool, and no view of another server calls this one's.
    let model_only = app_call(&app, &board, "count-cards", json!({}), BOARD_VIEW).await;
    assert_refused(&model_only, "APP_CALL_REFUSED", "model only");
    let foreign = app_call(
        &app,
        &board,
        "move-card",
        json!({"card": "c2", "to": "done"}),
        BASIC_VIEW,
    )
    .await;
    assert_refused(
        &foreign,
        "APP_CALL_REFUSED",
        "not a view of the server 'board'",
    );
    let basic_view_of_basic = app_call(&app, &basic, "get-time", json!({}), BASIC_VIEW).await;
    assert_eq!(
        basic_view_of_basic.status,
        StatusCode::OK,
        "{}",
        basic_view_of_basic.text
    );

    // Still one move: the refused calls never reached the server.
    let after = app.call("u", &board, "show-board", json!({})).await;
    assert_eq!(
        after.body["structuredContent"]["moves"], 1,
        "{}",
        after.text
    );

    // A model's call of the app-only tool is an unknown tool for it.
    let submitted = app
        .submit_calls(
            "u",
            &uuid::Uuid::now_v7().to_string(),
            "",
            json!([{"id": "m1", "name": "mcp__board__move-card", "arguments": {"card": "c3", "to": "x"}}]),
        )
        .await;
    assert_eq!(
        submitted.body["toolCalls"][0]["status"], "error",
        "{}",
        submitted.text
    );

    // The audit marks the view's call as the app's, and only it.
    let rows = audit_rows(&app, "move-card").await;
    let done: Vec<&Value> = rows.iter().filter(|r| r["outcome"] == "done").collect();
    assert_eq!(done.len(), 1, "{rows:?}");
    assert_eq!(done[0]["fromApp"], true);
    assert_eq!(done[0]["via"], "rest");
    let refused: Vec<&Value> = rows
        .iter()
        .filter(|r| r["errorCode"] == "APP_CALL_REFUSED")
        .collect();
    assert!(refused.iter().any(|r| r["fromApp"] == false), "{rows:?}");
    let shows = audit_rows(&app, "show-board").await;
    assert!(shows.iter().all(|r| r["fromApp"] == false), "{shows:?}");
}

/// A gateway client that renders views (declares the extension) or not.
async fn gateway_client(
    app: &TestApp,
    token: &str,
    renders_views: bool,
) -> RunningService<rmcp::RoleClient, ClientConfig> {
    let mut capabilities = ClientCapabilities::default();
    if renders_views {
        capabilities.extensions = Some(
            [(
                UI.to_owned(),
                json!({"mimeTypes": [APP_MIME]})
                    .as_object()
                    .unwrap()
                    .clone(),
            )]
            .into_iter()
            .collect(),
        );
    }
    ClientConfig::new(capabilities, Implementation::new("apps-host", "1.0.0"))
        .serve(StreamableHttpClientTransport::from_config(
            app.gateway_client_config("a1", token),
        ))
        .await
        .expect("the gateway accepts the client")
}

/// `tools/call` of `name`; `view`: relayed for that view (its gateway URI).
fn call(name: &str, arguments: Value, view: Option<&str>) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    if let Some(view) = view {
        let mut meta = RequestMetaObject::default();
        meta.insert(UI.to_owned(), json!({"resourceUri": view}));
        params.meta = Some(meta);
    }
    params
}

#[tokio::test]
async fn the_gateway_namespaces_views_and_a_view_calls_only_its_own_servers_tools() {
    let (app, _board, _basic) = apps_app().await;
    let token = app.gateway_token("u", "a1").await;
    let mut events = user_events(&app, "u").await;

    // A client that renders no views: no app-only tool; views under their server.
    let plain = gateway_client(&app, &token, false).await;
    let extensions = plain
        .peer_info()
        .and_then(|info| info.capabilities.extensions.clone())
        .unwrap_or_default();
    assert!(
        extensions.contains_key(UI),
        "the gateway offers MCP Apps: {extensions:?}"
    );
    let tools = plain.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(!names.contains(&"board__move-card"), "{names:?}");
    let show = tools
        .iter()
        .find(|t| t.name == "board__show-board")
        .expect("show-board");
    let meta = Value::Object(show.meta.as_deref().cloned().unwrap());
    assert_eq!(meta["ui"]["resourceUri"], "ui://board__board/view.html");
    assert_eq!(meta["ui/resourceUri"], "ui://board__board/view.html");
    let time = tools
        .iter()
        .find(|t| t.name == "basic__get-time")
        .expect("get-time");
    assert_eq!(
        Value::Object(time.meta.as_deref().cloned().unwrap())["ui"]["resourceUri"],
        "ui://basic__get-time/mcp-app.html"
    );
    // Nor can it call one.
    let refused = plain
        .call_tool(call(
            "board__move-card",
            json!({"card": "c1", "to": "x"}),
            None,
        ))
        .await
        .unwrap();
    assert_error_result(&refused, &["APP_CALL_REFUSED"]);

    // The views, listed and read under their gateway URIs, metadata unchanged.
    let host = gateway_client(&app, &token, true).await;
    let tools = host.list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "board__move-card"),
        "a host sees app-only tools"
    );
    let resources = host.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&"ui://board__board/view.html"), "{uris:?}");
    assert!(
        uris.contains(&"ui://basic__get-time/mcp-app.html"),
        "{uris:?}"
    );
    let read = host
        .read_resource(ReadResourceRequestParams::new(
            "ui://board__board/view.html",
        ))
        .await
        .unwrap();
    let contents = serde_json::to_value(&read.contents[0]).unwrap();
    assert_eq!(contents["uri"], "ui://board__board/view.html");
    assert_eq!(contents["mimeType"], APP_MIME);
    assert!(
        contents["text"]
            .as_str()
            .unwrap()
            .contains("<h1>Board</h1>")
    );
    assert_eq!(
        contents["_meta"]["ui"]["csp"]["connectDomains"],
        json!(["https://api.board.example"])
    );
    let basic_html = host
        .read_resource(ReadResourceRequestParams::new(
            "ui://basic__get-time/mcp-app.html",
        ))
        .await
        .unwrap();
    assert!(
        serde_json::to_value(&basic_html.contents[0]).unwrap()["text"]
            .as_str()
            .unwrap()
            .contains("<html"),
        "the example's view through the gateway"
    );

    // The view's call (by the name the view knows, its server's own) waits for the user's
    // approval like any call that needs it.
    let peer = host.peer().clone();
    let moving = tokio::spawn(async move {
        peer.call_tool(call(
            "move-card",
            json!({"card": "c1", "to": "done"}),
            Some("ui://board__board/view.html"),
        ))
        .await
    });
    let pending = next_pending(&mut events).await;
    assert_eq!(pending["toolCall"]["toolName"], "move-card");
    app.confirm(
        "u",
        pending["messageId"].as_str().unwrap(),
        pending["toolCall"]["id"].as_str().unwrap(),
        true,
    )
    .await;
    let moved = moving.await.unwrap().unwrap();
    assert_eq!(moved.is_error, Some(false), "{moved:?}");
    assert!(
        text(&moved).contains("moved c1 to done (move 1)"),
        "{moved:?}"
    );

    // Another server's view cannot reach this server's tools, nor a view its model-only ones.
    let foreign = host
        .call_tool(call(
            "board__show-board",
            json!({}),
            Some("ui://basic__get-time/mcp-app.html"),
        ))
        .await
        .unwrap();
    assert_error_result(&foreign, &["APP_CALL_REFUSED", "another server"]);
    let model_only = host
        .call_tool(call(
            "board__count-cards",
            json!({}),
            Some("ui://board__board/view.html"),
        ))
        .await
        .unwrap();
    assert_error_result(&model_only, &["APP_CALL_REFUSED"]);
    let unknown_view = host
        .call_tool(call(
            "board__show-board",
            json!({}),
            Some("ui://nobody/x.html"),
        ))
        .await
        .unwrap();
    assert_error_result(&unknown_view, &["not a view"]);

    // Still one move; the audit says the move was the app's, through the gateway.
    let shown = host
        .call_tool(call("board__show-board", json!({}), None))
        .await
        .unwrap();
    assert!(text(&shown).contains("1 moves"), "{shown:?}");
    let rows = audit_rows(&app, "move-card").await;
    let done: Vec<&Value> = rows.iter().filter(|r| r["outcome"] == "done").collect();
    assert_eq!(done.len(), 1, "{rows:?}");
    assert_eq!(done[0]["fromApp"], true);
    assert_eq!(done[0]["via"], "gateway");
}

/// The example server alone on a port of its own (its streamable HTTP endpoint); killed
/// when dropped.
async fn example_server_alone() -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script =
        apps_dir().join("node_modules/@modelcontextprotocol/server-basic-vanillajs/dist/index.js");
    let mut child = tokio::process::Command::new("node")
        .arg(script)
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts the example server");
    // Its output is read to the end (a closed pipe would end it at its next line).
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let (listening, ready) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut listening = Some(listening);
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("listening")
                && let Some(listening) = listening.take()
            {
                let _ = listening.send(());
            }
        }
    });
    tokio::time::timeout(std::time::Duration::from_secs(30), ready)
        .await
        .expect("the example server listens within 30 s")
        .expect("the example server ended before listening");
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test]
async fn an_app_renders_in_chromium_through_the_gateway_as_against_its_server_alone() {
    let (app, _board, _basic) = apps_app().await;
    let token = app.gateway_token("u", "a1").await;
    let (_alone, direct_url) = example_server_alone().await;
    crate::console_browser::run_console_script(
        &app,
        "../apps/host.test.mjs",
        &[
            ("DIRECT_URL", direct_url),
            ("GATEWAY_URL", format!("{}/mcp/assistants/a1", app.address)),
            ("GATEWAY_TOKEN", token),
        ],
    )
    .await;
    // Through the gateway: the host's call of the tool, then the view's, marked as the app's.
    let rows = audit_rows(&app, "get-time").await;
    let mut from_app: Vec<bool> = rows
        .iter()
        .filter(|r| r["via"] == "gateway" && r["outcome"] == "done")
        .map(|r| r["fromApp"].as_bool().unwrap())
        .collect();
    from_app.sort();
    assert_eq!(from_app, vec![false, true], "{rows:?}");
}

#[tokio::test]
async fn a_views_call_meets_the_operators_policies_on_both_doors() {
    let (app, board, _basic) = apps_app().await;
    crate::governance::set_attributes(&app, "u", &[], "free").await;
    crate::governance::set_policies(
        &app,
        json!({"rules": [{
            "name": "no-moves-on-free", "action": "deny",
            "when": "tool.name == \"move-card\" && user.plan == \"free\" && has(arguments.to) && arguments.to == \"done\"",
            "description": "the free plan cannot finish cards"
        }]}),
    )
    .await;

    // REST: the host's relay of the view's call is refused as any call would be.
    let refused = app_call(
        &app,
        &board,
        "move-card",
        json!({"card": "c1", "to": "done"}),
        BOARD_VIEW,
    )
    .await;
    assert_refused(&refused, "POLICY_DENIED", "no-moves-on-free");

    // (The rule reads the arguments, so the tool stays offered: a rule that denies a
    // tool whatever its arguments hides it, and a view's call of it is an unknown tool.)
    // The gateway: an error result the view (and its host) can read.
    let token = app.gateway_token("u", "a1").await;
    let host = gateway_client(&app, &token, true).await;
    let denied = host
        .call_tool(call(
            "move-card",
            json!({"card": "c1", "to": "done"}),
            Some("ui://board__board/view.html"),
        ))
        .await
        .unwrap();
    assert_error_result(&denied, &["POLICY_DENIED"]);

    // Nothing moved; the refusals are the app's in the audit.
    let shown = app.call("u", &board, "show-board", json!({})).await;
    assert_eq!(
        shown.body["structuredContent"]["moves"], 0,
        "{}",
        shown.text
    );
    let rows = audit_rows(&app, "move-card").await;
    assert!(
        rows.iter().any(|r| r["errorCode"] == "POLICY_DENIED"
            && r["fromApp"] == true
            && r["via"] == "rest"),
        "{rows:?}"
    );
}
