use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{remote_server, spawn_app, spawn_app_with};

#[tokio::test]
async fn invalid_definitions_get_422_with_a_message_naming_the_problem() {
    let app = spawn_app().await;
    let cases = [
        (json!({"baseUrl": "https://93.184.216.34/mcp"}), "name"),
        (
            json!({"name": "   ", "baseUrl": "https://93.184.216.34/mcp"}),
            "name",
        ),
        (
            json!({"name": "x".repeat(65), "baseUrl": "https://93.184.216.34/mcp"}),
            "name",
        ),
        (json!({"name": "a"}), "type"),
        (
            json!({"name": "a", "type": "websocket", "baseUrl": "https://93.184.216.34/mcp"}),
            "websocket",
        ),
        (json!({"name": "a", "type": "sse"}), "baseUrl"),
        (json!({"name": "a", "baseUrl": "not a url"}), "baseUrl"),
        (
            json!({"name": "a", "baseUrl": "ftp://93.184.216.34/x"}),
            "http",
        ),
        (
            json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "timeoutSecs": 0}),
            "timeoutSecs",
        ),
        (
            json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "timeoutSecs": 100000}),
            "timeoutSecs",
        ),
        (
            json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "headers": {"bad header": "v"}}),
            "header",
        ),
        (
            json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "headers": {"X": "line\nbreak"}}),
            "header",
        ),
        (
            json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "headers": {"X": "********"}}),
            "mask",
        ),
        (
            json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "env": {"A": "b"}}),
            "stdio",
        ),
        (
            json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "disabledTools": [""]}),
            "disabledTools",
        ),
        (json!({"name": "a", "type": "stdio"}), "preset"),
    ];
    for (body, needle) in cases {
        let reply = app.create_server("u", body.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body} -> {}",
            reply.text
        );
        assert_eq!(reply.code(), "VALIDATION_ERROR", "{body}");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{body}: '{message}' should mention '{needle}'"
        );
    }
    let list = app.user("u", Method::GET, "/api/mcp-servers", None).await;
    assert_eq!(
        list.body["servers"],
        json!([]),
        "nothing invalid was stored"
    );
}

#[tokio::test]
async fn wrong_json_types_are_422_and_broken_json_is_400() {
    let app = spawn_app().await;
    let wrong_type = app
        .create_server(
            "u",
            json!({"name": 5, "baseUrl": "https://93.184.216.34/mcp"}),
        )
        .await;
    assert_eq!(wrong_type.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(wrong_type.code(), "VALIDATION_ERROR");
    let negative = app
        .create_server(
            "u",
            json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "timeoutSecs": -1}),
        )
        .await;
    assert_eq!(negative.status, StatusCode::UNPROCESSABLE_ENTITY);

    let broken = app
        .send_raw(
            app.request(Method::POST, "/api/mcp-servers")
                .bearer_auth(&app.service_key)
                .header("X-User-Id", "u")
                .header("Content-Type", "application/json")
                .body("{\"name\": \"a\",,}"),
        )
        .await;
    assert_eq!(broken.status, StatusCode::BAD_REQUEST, "{}", broken.text);
    assert_eq!(broken.code(), "INVALID_JSON");

    let no_type = app
        .send_raw(
            app.request(Method::POST, "/api/mcp-servers")
                .bearer_auth(&app.service_key)
                .header("X-User-Id", "u")
                .body(remote_server("a").to_string()),
        )
        .await;
    assert_eq!(no_type.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(no_type.code(), "UNSUPPORTED_MEDIA_TYPE");
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_413() {
    let app = spawn_app_with(|s| s.server.max_body_bytes = 4096).await;
    let big = json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "headers": {"X": "v".repeat(8000)}});
    let reply = app.create_server("u", big).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        reply.text
    );
    assert_eq!(reply.code(), "PAYLOAD_TOO_LARGE");
}

#[tokio::test]
async fn values_over_the_configured_limits_are_refused() {
    let app = spawn_app_with(|s| {
        s.limits.max_secret_entries = 2;
        s.limits.max_value_bytes = 16;
        s.limits.max_tool_list_entries = 2;
    })
    .await;
    let too_many = json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "headers": {"A": "1", "B": "2", "C": "3"}});
    assert_eq!(
        app.create_server("u", too_many).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let too_long = json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "headers": {"A": "x".repeat(17)}});
    assert_eq!(
        app.create_server("u", too_long).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let tools = json!({"name": "a", "baseUrl": "https://93.184.216.34/mcp", "disabledTools": ["a", "b", "c"]});
    assert_eq!(
        app.create_server("u", tools).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_json() {
    let app = spawn_app().await;
    let missing = app.user("u", Method::GET, "/api/nothing-here", None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.code(), "NOT_FOUND");
    let method = app.user("u", Method::PATCH, "/api/mcp-servers", None).await;
    assert_eq!(method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(method.code(), "METHOD_NOT_ALLOWED");
    let bad_id = app
        .user("u", Method::GET, "/api/mcp-servers/not-a-uuid", None)
        .await;
    assert_eq!(bad_id.status, StatusCode::NOT_FOUND);
    assert_eq!(bad_id.code(), "MCP_SERVER_NOT_FOUND");
}
