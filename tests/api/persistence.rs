use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn everything_survives_a_restart() {
    let app = spawn_app().await;
    app.create_preset_ok(json!({"name": "time", "command": "uvx", "args": ["mcp-server-time"], "envSlots": [{"name": "TZ"}]}))
        .await;
    let remote = app
        .create_server_ok(
            "alice",
            json!({"name": "r", "baseUrl": "https://93.184.216.34/sse", "headers": {"Authorization": "Bearer keep-me"}}),
        )
        .await;
    let stdio = app
        .create_server_ok(
            "alice",
            json!({"name": "t", "preset": "time", "env": {"TZ": "Asia/Shanghai"}}),
        )
        .await;
    app.bind_ok("alice", "a1", [&stdio, &remote]).await;
    let before = app
        .user("alice", Method::GET, "/api/mcp-servers", None)
        .await;

    let app = app.restart().await;

    let after = app
        .user("alice", Method::GET, "/api/mcp-servers", None)
        .await;
    assert_eq!(
        after.status,
        StatusCode::OK,
        "the service key still works: {}",
        after.text
    );
    assert_eq!(after.body, before.body);
    let bindings = app
        .user("alice", Method::GET, "/api/assistants/a1/mcp-servers", None)
        .await;
    assert_eq!(bindings.body["serverIds"], json!([stdio, remote]));
    let presets = app.admin(Method::GET, "/admin/presets", None).await;
    assert_eq!(presets.body["presets"][0]["name"], "time");
    // Stored secrets still open with the key in the data directory: an update keeps them.
    let update = app
        .user(
            "alice",
            Method::PUT,
            &format!("/api/mcp-servers/{remote}"),
            Some(json!({"name": "renamed"})),
        )
        .await;
    assert_eq!(update.status, StatusCode::OK, "{}", update.text);
    assert_eq!(update.body["headers"], json!({"Authorization": "********"}));
}
