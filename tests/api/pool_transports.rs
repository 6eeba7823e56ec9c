//! The pool against real MCP servers over every transport.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app};
use crate::upstreams::{HttpUpstream, everything_preset, fixture_preset, text_of};

async fn exercise_fixture(app: &TestApp, server: &str) {
    let connect = app.connect("u", server).await;
    assert_eq!(connect.status, StatusCode::OK, "{}", connect.text);
    assert_eq!(connect.body["status"], "connected");
    assert_eq!(connect.body["serverInfo"]["name"], "mcp-fixture");
    assert_eq!(connect.body["toolCount"], 13);
    assert!(connect.body["latencyMs"].as_f64().unwrap() > 0.0);

    let echo = app
        .call("u", server, "echo", json!({"text": "hello"}))
        .await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    assert_eq!(text_of(&echo.body), "hello");
    assert_eq!(echo.body["isError"], false);
    let add = app
        .call("u", server, "add", json!({"a": 2, "b": 3.5}))
        .await;
    assert_eq!(text_of(&add.body), "5.5");
    let fail = app
        .call("u", server, "fail", json!({"message": "nope"}))
        .await;
    assert_eq!(
        fail.status,
        StatusCode::OK,
        "a tool error is a result the model reads"
    );
    assert_eq!(fail.body["isError"], true);
    assert_eq!(text_of(&fail.body), "nope");

    let resources = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}/resources"),
            None,
        )
        .await;
    assert_eq!(resources.body["resources"][0]["uri"], "fixture://greeting");
    let read = app
        .user(
            "u",
            Method::POST,
            &format!("/api/mcp-servers/{server}/resources/read"),
            Some(json!({"uri": "fixture://greeting"})),
        )
        .await;
    assert_eq!(read.body["contents"][0]["text"], "hello from the fixture");
    let prompt = app
        .user(
            "u",
            Method::POST,
            &format!("/api/mcp-servers/{server}/prompts/greet"),
            Some(json!({"arguments": {"name": "Ada"}})),
        )
        .await;
    assert_eq!(
        prompt.body["messages"][0]["content"]["text"],
        "Say hello to Ada"
    );
}

#[tokio::test]
async fn the_fixture_works_over_stdio() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    exercise_fixture(&app, &server).await;
}

#[tokio::test]
async fn the_fixture_works_over_streamable_http() {
    let upstream = HttpUpstream::fixture(None).await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    exercise_fixture(&app, &server).await;
}

#[tokio::test]
async fn the_fixture_works_over_legacy_sse() {
    let upstream = HttpUpstream::fixture(None).await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "baseUrl": format!("{}/sse", upstream.base)}),
        )
        .await;
    let created = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}"),
            None,
        )
        .await;
    assert_eq!(created.body["type"], "sse");
    exercise_fixture(&app, &server).await;
}

async fn exercise_everything(app: &TestApp, server: &str) {
    let tools = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}/tools"),
            None,
        )
        .await;
    assert_eq!(tools.status, StatusCode::OK, "{}", tools.text);
    let names: Vec<&str> = tools.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for expected in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let echo = tools.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap();
    assert_eq!(echo["displayName"], "mcp__everything__echo");

    let sum = app
        .call("u", server, "get-sum", json!({"a": 2, "b": 3}))
        .await;
    assert_eq!(sum.status, StatusCode::OK, "{}", sum.text);
    assert!(text_of(&sum.body).contains('5'), "{}", sum.text);
    let echoed = app
        .call("u", server, "echo", json!({"message": "ping"}))
        .await;
    assert!(text_of(&echoed.body).contains("ping"));

    let resources = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}/resources"),
            None,
        )
        .await;
    let uri = resources.body["resources"][0]["uri"]
        .as_str()
        .expect("a resource")
        .to_owned();
    let read = app
        .user(
            "u",
            Method::POST,
            &format!("/api/mcp-servers/{server}/resources/read"),
            Some(json!({"uri": uri})),
        )
        .await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    assert_eq!(read.body["contents"][0]["uri"], uri.as_str());

    let prompts = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}/prompts"),
            None,
        )
        .await;
    assert!(
        prompts.body["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "args-prompt")
    );
    let prompt = app
        .user(
            "u",
            Method::POST,
            &format!("/api/mcp-servers/{server}/prompts/args-prompt"),
            Some(json!({"arguments": {"city": "Hangzhou"}})),
        )
        .await;
    assert_eq!(prompt.status, StatusCode::OK, "{}", prompt.text);
    assert!(prompt.text.contains("Hangzhou"));

    let long = app
        .call(
            "u",
            server,
            "trigger-long-running-operation",
            json!({"duration": 1, "steps": 3}),
        )
        .await;
    assert_eq!(long.status, StatusCode::OK, "{}", long.text);
    let progress = long.body["progress"].as_array().unwrap();
    assert!(
        !progress.is_empty(),
        "progress notifications reach the caller: {}",
        long.text
    );
    assert_eq!(progress.last().unwrap()["total"], json!(3.0));
}

#[tokio::test]
async fn server_everything_works_over_stdio() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(everything_preset()).await;
    let server = app
        .create_server_ok("u", json!({"name": "everything", "preset": "everything"}))
        .await;
    exercise_everything(&app, &server).await;
}

#[tokio::test]
async fn server_everything_works_over_streamable_http() {
    let upstream = HttpUpstream::everything("streamableHttp").await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "everything", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    exercise_everything(&app, &server).await;
}

#[tokio::test]
async fn server_everything_works_over_legacy_sse() {
    let upstream = HttpUpstream::everything("sse").await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "everything", "baseUrl": format!("{}/sse", upstream.base)}),
        )
        .await;
    exercise_everything(&app, &server).await;
}

#[tokio::test]
async fn tool_listing_reflects_the_users_settings() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "My Fixture", "preset": "fixture", "disabledTools": ["crash"], "autoApproveTools": ["echo"]}),
        )
        .await;
    let tools = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}/tools"),
            None,
        )
        .await;
    let find = |name: &str| -> Value {
        tools.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(find("crash")["isEnabled"], false);
    assert_eq!(find("echo")["isAutoApprove"], true);
    assert_eq!(find("add")["isEnabled"], true);
    assert_eq!(find("add")["isAutoApprove"], false);
    assert_eq!(find("echo")["displayName"], "mcp__My_Fixture__echo");
    assert_eq!(find("echo")["inputSchema"]["required"], json!(["text"]));
}

#[tokio::test]
async fn calls_are_checked_before_they_reach_the_server() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "fixture", "disabledTools": ["crash"]}),
        )
        .await;
    let bad = app.call("u", &server, "add", json!({"a": "one"})).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
    assert_eq!(bad.code(), "INVALID_ARGUMENTS");
    let details: Vec<&str> = bad.body["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(details.iter().any(|d| d.starts_with("/a")), "{details:?}");
    assert!(details.iter().any(|d| d.contains("\"b\"")), "{details:?}");
    let not_object = app.call("u", &server, "echo", json!(["text"])).await;
    assert_eq!(not_object.code(), "INVALID_ARGUMENTS");

    let unknown = app.call("u", &server, "no_such_tool", json!({})).await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "TOOL_NOT_FOUND")
    );
    let disabled = app.call("u", &server, "crash", json!({})).await;
    assert_eq!(
        (disabled.status, disabled.code()),
        (StatusCode::FORBIDDEN, "TOOL_DISABLED")
    );

    app.user(
        "u",
        Method::PUT,
        &format!("/api/mcp-servers/{server}"),
        Some(json!({"isActive": false})),
    )
    .await;
    let inactive = app.call("u", &server, "echo", json!({"text": "x"})).await;
    assert_eq!(
        (inactive.status, inactive.code()),
        (StatusCode::CONFLICT, "SERVER_INACTIVE")
    );
}

#[tokio::test]
async fn stdio_children_get_a_minimal_environment() {
    assert!(
        std::env::var("CARGO_MANIFEST_DIR").is_ok(),
        "precondition: the test process has it"
    );
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let env = |name: &'static str| {
        let app = &app;
        let server = server.clone();
        async move {
            text_of(
                &app.call("u", &server, "env", json!({"name": name}))
                    .await
                    .body,
            )
            .to_owned()
        }
    };
    assert_eq!(
        env("CARGO_MANIFEST_DIR").await,
        "<unset>",
        "the service's own variables stay out"
    );
    assert_eq!(env("FIXTURE_GREETING").await, "from the preset");
    assert_ne!(env("PATH").await, "<unset>");
    assert_ne!(env("LANG").await, "<unset>");
}

/// Calls over streamable HTTP reuse kept-alive connections instead of opening one per
/// request (each a TCP, and toward real servers a TLS, handshake).
#[tokio::test]
async fn streamable_http_calls_reuse_connections() {
    for (upstream, field) in [
        (HttpUpstream::fixture(None).await, "text"),
        (HttpUpstream::everything("streamableHttp").await, "message"),
    ] {
        let (port, accepted) = crate::upstreams::counting_proxy(upstream.port()).await;
        let app = spawn_pool_app().await;
        let server = app
            .create_server_ok(
                "u",
                json!({"name": "up", "baseUrl": format!("http://127.0.0.1:{port}/mcp")}),
            )
            .await;
        const CALLS: usize = 20;
        for i in 0..CALLS {
            let echo = app
                .call("u", &server, "echo", json!({field: format!("call {i}")}))
                .await;
            assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
        }
        let opened = accepted.load(std::sync::atomic::Ordering::SeqCst);
        // One per request would be CALLS + 2 (the initialize and the GET stream). How
        // many are reused depends on how fast each answer's stream is drained back into
        // the pool, which a loaded machine slows: the claim is only "fewer than calls".
        assert!(
            opened < CALLS,
            "{opened} connections opened for {CALLS} calls (and the initialize)"
        );
    }
}
