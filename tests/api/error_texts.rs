//! What a person reads when a connection fails names the cause in words, never a type
//! path of the service's libraries (issue 40, "Diagnostics").

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::spawn_app_with;

#[tokio::test]
async fn a_refused_connection_says_refused_and_no_type_path() {
    let app = spawn_app_with(|s| s.security.allow_loopback_urls = true).await;
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let id = app
        .create_server_ok(
            "u",
            json!({"name": "gone", "type": "streamableHttp",
                   "baseUrl": format!("http://127.0.0.1:{port}/mcp")}),
        )
        .await;
    let failed = app.connect("u", &id).await;
    assert_eq!(failed.status, StatusCode::BAD_GATEWAY, "{}", failed.text);
    assert_eq!(failed.code(), "MCP_CONNECTION_ERROR", "{}", failed.text);
    let message = failed.body["error"]["message"].as_str().unwrap();
    assert!(
        message.to_lowercase().contains("refused"),
        "the cause is named: {message}"
    );
    assert!(!message.contains("::"), "no type path: {message}");
    let connections = app.connections().await;
    let last_error = connections[0]["lastError"].as_str().unwrap_or_default();
    assert!(!last_error.contains("::"), "no type path: {last_error}");
}
