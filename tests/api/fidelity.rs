//! What a server declares reaches users and models as declared: a real server (the
//! TypeScript SDK's, `tests/upstreams/as_declared_server.mjs`) whose tools, resources,
//! prompts and results have keys in a chosen, non-alphabetical order, a tool's
//! `execution`, and fields no spec revision defines. The pool must not reorder or drop any
//! of it, through REST (every tool format) and the gateway.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app};
use crate::upstreams::sdk_script_path;

/// The server's `inputSchema`, compact, exactly as it writes it.
const ORDERED_SCHEMA: &str = r#"{"type":"object","required":["zeta","alpha"],"properties":{"zeta":{"type":"string","description":"Asked first on purpose"},"alpha":{"type":"integer","minimum":1,"description":"Then this"},"middle":{"type":"object","properties":{"yes":{"type":"boolean"},"no":{"type":"boolean"}}}},"additionalProperties":false}"#;
const OUTPUT_SCHEMA: &str = r#""outputSchema":{"type":"object","properties":{"zulu":{"type":"string"},"alpha":{"type":"string"}},"required":["zulu","alpha"]}"#;
/// Fields of the tool the spec leaves open or does not define.
const ANNOTATIONS: &str = r#""annotations":{"readOnlyHint":true,"category":"navigation","conditions":["a page is open"]}"#;
const EXECUTION: &str = r#""execution":{"taskSupport":"optional"}"#;
const VENDOR: &str = r#""x-vendor":{"zulu":1,"alpha":2}"#;
/// Fields of the call's result.
const STRUCTURED: &str = r#""structuredContent":{"zulu":"last letter","alpha":"first letter"}"#;
const TRACE: &str = r#""x-trace":{"span":"b7","at":2}"#;

/// User `u` with the server as `declared`, bound to assistant `a1`: the app and its id.
async fn declared_server() -> (TestApp, String) {
    let app = spawn_pool_app().await;
    app.create_preset_ok(json!({
        "name": "as-declared",
        "command": "node",
        "args": [sdk_script_path("as_declared_server.mjs")],
    }))
    .await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "declared", "preset": "as-declared", "autoApproveTools": ["ordered"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    (app, server)
}

fn assert_has(text: &str, part: &str, what: &str) {
    assert!(
        text.contains(part),
        "{what} lacks, byte for byte, {part}\nin {text}"
    );
}

#[tokio::test]
async fn key_order_and_unknown_fields_reach_rest_callers_as_the_server_wrote_them() {
    let (app, server) = declared_server().await;

    let listed = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}/tools"),
            None,
        )
        .await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
    for part in [
        ORDERED_SCHEMA,
        OUTPUT_SCHEMA,
        ANNOTATIONS,
        EXECUTION,
        VENDOR,
    ] {
        assert_has(&listed.text, part, "the server's tool list");
    }

    for format in ["mcp", "openai", "anthropic"] {
        let tools = app
            .user(
                "u",
                Method::GET,
                &format!("/api/assistants/a1/tools?format={format}"),
                None,
            )
            .await;
        assert_eq!(tools.status, StatusCode::OK, "{}", tools.text);
        assert_has(&tools.text, ORDERED_SCHEMA, format);
        if format == "mcp" {
            for part in [OUTPUT_SCHEMA, ANNOTATIONS, EXECUTION, VENDOR] {
                assert_has(&tools.text, part, format);
            }
        }
    }

    let called = app
        .call("u", &server, "ordered", json!({"zeta": "z", "alpha": 1}))
        .await;
    assert_eq!(called.status, StatusCode::OK, "{}", called.text);
    assert_has(&called.text, STRUCTURED, "the call's result");
    assert_has(&called.text, TRACE, "the call's result");

    let resources = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}/resources"),
            None,
        )
        .await;
    assert_eq!(resources.status, StatusCode::OK, "{}", resources.text);
    assert_has(&resources.text, VENDOR, "the resource list");
    let prompts = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}/prompts"),
            None,
        )
        .await;
    assert_eq!(prompts.status, StatusCode::OK, "{}", prompts.text);
    assert_has(&prompts.text, VENDOR, "the prompt list");
    app.stop().await;
}

#[tokio::test]
async fn key_order_and_unknown_fields_reach_gateway_clients_as_the_server_wrote_them() {
    let (app, _server) = declared_server().await;
    let token = app.gateway_token("u", "a1").await;
    let client = reqwest::Client::new();
    let url = format!("{}/mcp/assistants/a1", app.address);
    let post = |session: Option<String>, body: Value| {
        let mut request = client
            .post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        request.send()
    };
    let initialized = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await
    .unwrap();
    let session = initialized.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    initialized.bytes().await.unwrap();
    let ack = post(
        Some(session.clone()),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await
    .unwrap();
    assert_eq!(ack.status(), StatusCode::ACCEPTED);
    // The whole answer as sent (a JSON body or one event), not re-read.
    let answer = |id: u64, method: &str, params: Value| {
        let request = post(
            Some(session.clone()),
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        async move {
            let response = request.await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            response.text().await.unwrap()
        }
    };

    let tools = answer(2, "tools/list", json!({})).await;
    for part in [
        ORDERED_SCHEMA,
        OUTPUT_SCHEMA,
        ANNOTATIONS,
        EXECUTION,
        VENDOR,
    ] {
        assert_has(&tools, part, "the gateway's tools/list");
    }
    let name = serde_json::from_str::<Value>(
        tools
            .lines()
            .find_map(|line| line.strip_prefix("data: "))
            .unwrap_or(&tools),
    )
    .unwrap()["result"]["tools"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let called = answer(
        3,
        "tools/call",
        json!({"name": name, "arguments": {"zeta": "z", "alpha": 1}}),
    )
    .await;
    assert_has(&called, STRUCTURED, "the gateway's tools/call");
    assert_has(&called, TRACE, "the gateway's tools/call");
    let resources = answer(4, "resources/list", json!({})).await;
    assert_has(&resources, VENDOR, "the gateway's resources/list");
    let prompts = answer(5, "prompts/list", json!({})).await;
    assert_has(&prompts, VENDOR, "the gateway's prompts/list");
    app.stop().await;
}
