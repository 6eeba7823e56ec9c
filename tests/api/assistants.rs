use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{remote_server, spawn_app, spawn_app_with};

#[tokio::test]
async fn bindings_are_replaced_in_order_without_duplicates() {
    let app = spawn_app().await;
    let one = app.create_server_ok("u", remote_server("one")).await;
    let two = app.create_server_ok("u", remote_server("two")).await;
    let path = "/api/assistants/asst_42/mcp-servers";

    let empty = app.user("u", Method::GET, path, None).await;
    assert_eq!(empty.status, StatusCode::OK);
    assert_eq!(
        empty.body,
        json!({"assistantId": "asst_42", "serverIds": []})
    );

    let put = app
        .user(
            "u",
            Method::PUT,
            path,
            Some(json!({"serverIds": [two, one, two]})),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    assert_eq!(put.body["serverIds"], json!([two, one]));
    assert_eq!(
        app.user("u", Method::GET, path, None).await.body["serverIds"],
        json!([two, one])
    );

    let replaced = app
        .user("u", Method::PUT, path, Some(json!({"mcpServerIds": [one]})))
        .await;
    assert_eq!(replaced.body["serverIds"], json!([one]));
}

#[tokio::test]
async fn unknown_ids_are_refused_and_nothing_changes() {
    let app = spawn_app().await;
    let one = app.create_server_ok("u", remote_server("one")).await;
    let path = "/api/assistants/a1/mcp-servers";
    app.user("u", Method::PUT, path, Some(json!({"serverIds": [one]})))
        .await;
    for bad in [
        json!([one, "not-a-uuid"]),
        json!([one, uuid::Uuid::new_v4().to_string()]),
    ] {
        let reply = app
            .user("u", Method::PUT, path, Some(json!({"serverIds": bad})))
            .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.text);
        assert_eq!(reply.code(), "MCP_SERVER_NOT_FOUND");
    }
    assert_eq!(
        app.user("u", Method::GET, path, None).await.body["serverIds"],
        json!([one])
    );
    let bad_assistant = app
        .user("u", Method::GET, "/api/assistants/a%20b/mcp-servers", None)
        .await;
    assert_eq!(bad_assistant.status, StatusCode::UNPROCESSABLE_ENTITY);
    let missing_field = app.user("u", Method::PUT, path, Some(json!({}))).await;
    assert_eq!(missing_field.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn deleting_a_server_unbinds_it() {
    let app = spawn_app().await;
    let one = app.create_server_ok("u", remote_server("one")).await;
    let two = app.create_server_ok("u", remote_server("two")).await;
    let path = "/api/assistants/a1/mcp-servers";
    app.user(
        "u",
        Method::PUT,
        path,
        Some(json!({"serverIds": [one, two]})),
    )
    .await;
    app.user(
        "u",
        Method::DELETE,
        &format!("/api/mcp-servers/{one}"),
        None,
    )
    .await;
    assert_eq!(
        app.user("u", Method::GET, path, None).await.body["serverIds"],
        json!([two])
    );
}

#[tokio::test]
async fn an_assistant_binds_a_limited_number_of_servers() {
    let app = spawn_app_with(|s| s.limits.max_servers_per_assistant = 1).await;
    let one = app.create_server_ok("u", remote_server("one")).await;
    let two = app.create_server_ok("u", remote_server("two")).await;
    let reply = app
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a/mcp-servers",
            Some(json!({"serverIds": [one, two]})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert_eq!(reply.code(), "LIMIT_REACHED");
}
