//! One user never sees or touches another's rows: every such attempt is a plain 404.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{remote_server, spawn_app};

#[tokio::test]
async fn another_users_server_is_not_found_on_every_route() {
    let app = spawn_app().await;
    let alice_server = app
        .create_server_ok("alice", remote_server("private"))
        .await;
    let path = format!("/api/mcp-servers/{alice_server}");

    let attempts = [
        (Method::GET, None),
        (Method::PUT, Some(json!({"name": "stolen"}))),
        (Method::DELETE, None),
    ];
    for (method, body) in attempts {
        let reply = app.user("mallory", method.clone(), &path, body).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{method}");
        assert_eq!(reply.code(), "MCP_SERVER_NOT_FOUND");
        assert!(!reply.text.contains("alice"), "no details about the owner");
    }
    let list = app
        .user("mallory", Method::GET, "/api/mcp-servers", None)
        .await;
    assert_eq!(list.body["servers"], json!([]));

    let bind = app
        .user(
            "mallory",
            Method::PUT,
            "/api/assistants/shared/mcp-servers",
            Some(json!({"serverIds": [alice_server]})),
        )
        .await;
    assert_eq!(bind.status, StatusCode::NOT_FOUND);
    assert_eq!(bind.code(), "MCP_SERVER_NOT_FOUND");

    // Alice's server is untouched by all of that.
    let still = app.user("alice", Method::GET, &path, None).await;
    assert_eq!(still.status, StatusCode::OK);
    assert_eq!(still.body["name"], "private");
}

#[tokio::test]
async fn assistant_bindings_are_per_user_even_for_the_same_assistant_id() {
    let app = spawn_app().await;
    let a = app.create_server_ok("alice", remote_server("a")).await;
    let b = app.create_server_ok("bob", remote_server("b")).await;
    let path = "/api/assistants/assistant-1/mcp-servers";
    app.user("alice", Method::PUT, path, Some(json!({"serverIds": [a]})))
        .await;
    app.user("bob", Method::PUT, path, Some(json!({"serverIds": [b]})))
        .await;
    let alice = app.user("alice", Method::GET, path, None).await;
    let bob = app.user("bob", Method::GET, path, None).await;
    assert_eq!(alice.body["serverIds"], json!([a]));
    assert_eq!(bob.body["serverIds"], json!([b]));
    let carol = app.user("carol", Method::GET, path, None).await;
    assert_eq!(carol.body["serverIds"], json!([]));
}
