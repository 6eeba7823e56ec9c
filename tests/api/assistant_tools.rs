//! An assistant's tools in each model API's shape, named uniquely across its servers.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::spawn_pool_app;
use crate::upstreams::{HttpUpstream, fixture_preset};

/// The name at `pointer` of each tool of a listing's `tools`.
pub(crate) fn names(body: &Value, pointer: &str) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.pointer(pointer).unwrap().as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn tools_of_every_bound_server_in_each_format() {
    let upstream = HttpUpstream::fixture(None).await;
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let local = app
        .create_server_ok(
            "u",
            json!({"name": "local", "preset": "fixture", "disabledTools": ["crash", "pid"]}),
        )
        .await;
    let remote = app
        .create_server_ok(
            "u",
            json!({"name": "remote", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    app.bind_ok("u", "a1", [&local, &remote]).await;

    let mcp = app
        .user(
            "u",
            Method::GET,
            "/api/assistants/a1/tools?format=mcp",
            None,
        )
        .await;
    assert_eq!(mcp.status, StatusCode::OK, "{}", mcp.text);
    let listed = names(&mcp.body, "/name");
    assert_eq!(
        listed.len(),
        11 + 13,
        "disabled tools are left out: {listed:?}"
    );
    assert!(
        listed.contains(&"mcp__local__echo".to_owned())
            && listed.contains(&"mcp__remote__echo".to_owned())
    );
    assert!(!listed.contains(&"mcp__local__crash".to_owned()));
    assert_eq!(
        listed[0], "mcp__local__echo",
        "the user's binding order is kept"
    );
    assert!(mcp.body["tools"][0]["inputSchema"]["properties"]["text"].is_object());
    assert_eq!(mcp.body["unavailable"], json!([]));

    let openai = app
        .user(
            "u",
            Method::GET,
            "/api/assistants/a1/tools?format=openai",
            None,
        )
        .await;
    let first = &openai.body["tools"][0];
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "mcp__local__echo");
    assert_eq!(first["function"]["description"], "Returns its text");
    assert_eq!(first["function"]["parameters"]["required"], json!(["text"]));

    let anthropic = app
        .user(
            "u",
            Method::GET,
            "/api/assistants/a1/tools?format=anthropic",
            None,
        )
        .await;
    let first = &anthropic.body["tools"][0];
    assert_eq!(first["name"], "mcp__local__echo");
    assert_eq!(first["input_schema"]["type"], "object");
    assert!(first.get("inputSchema").is_none());

    let default = app
        .user("u", Method::GET, "/api/assistants/a1/tools", None)
        .await;
    assert_eq!(default.body["format"], "mcp");
    let bad = app
        .user(
            "u",
            Method::GET,
            "/api/assistants/a1/tools?format=gemini",
            None,
        )
        .await;
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_ERROR")
    );
}

#[tokio::test]
async fn names_stay_unique_when_server_names_sanitize_alike() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let a = app
        .create_server_ok("u", json!({"name": "my.tools", "preset": "fixture"}))
        .await;
    let b = app
        .create_server_ok("u", json!({"name": "my tools", "preset": "fixture"}))
        .await;
    app.bind_ok("u", "a1", [&a, &b]).await;
    let reply = app
        .user("u", Method::GET, "/api/assistants/a1/tools", None)
        .await;
    let mut listed = names(&reply.body, "/name");
    assert_eq!(listed.len(), 26);
    assert!(listed.iter().all(|n| {
        n.len() <= 63
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }));
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), 26, "no two tools share a name");
}

#[tokio::test]
async fn a_failing_server_is_reported_and_the_others_still_listed() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let good = app
        .create_server_ok("u", json!({"name": "good", "preset": "fixture"}))
        .await;
    let port = crate::upstreams::free_port();
    let down = app
        .create_server_ok(
            "u",
            json!({"name": "down", "baseUrl": format!("http://127.0.0.1:{port}/mcp")}),
        )
        .await;
    let off = app
        .create_server_ok(
            "u",
            json!({"name": "off", "preset": "fixture", "isActive": false}),
        )
        .await;
    app.bind_ok("u", "a1", [&down, &good, &off]).await;
    let reply = app
        .user(
            "u",
            Method::GET,
            "/api/assistants/a1/tools?format=openai",
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body["tools"].as_array().unwrap().len(),
        13,
        "only the good server's tools"
    );
    let unavailable = reply.body["unavailable"].as_array().unwrap();
    assert_eq!(
        unavailable.len(),
        1,
        "an inactive server is not an outage: {unavailable:?}"
    );
    assert_eq!(unavailable[0]["serverId"], down.as_str());
    assert_eq!(unavailable[0]["code"], "MCP_CONNECTION_ERROR");

    let stranger = app
        .user("mallory", Method::GET, "/api/assistants/a1/tools", None)
        .await;
    assert_eq!(stranger.body["tools"], json!([]), "bindings are per user");
}
