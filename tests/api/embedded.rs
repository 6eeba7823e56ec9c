//! Embedded servers: tools that run inside the service, through the same pool.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;
use crate::upstreams::text_of;

#[tokio::test]
async fn embedded_servers_are_created_and_called_like_any_other() {
    let app = spawn_app().await;
    let calc = app
        .create_server_ok(
            "u",
            json!({"name": "calc", "type": "embedded", "embedded": "calculator"}),
        )
        .await;
    let clock = app
        .create_server_ok("u", json!({"name": "clock", "embedded": "clock"}))
        .await;
    let read = app
        .user("u", Method::GET, &format!("/api/mcp-servers/{calc}"), None)
        .await;
    assert_eq!(read.body["type"], "embedded");
    assert_eq!(read.body["embedded"], "calculator");

    let tools = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{calc}/tools"),
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
    assert_eq!(names, vec!["calculate", "add"]);

    let reply = app
        .call(
            "u",
            &calc,
            "calculate",
            json!({"expression": "7 / 2 + sqrt(16)"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(text_of(&reply.body), "7.5");
    let reply = app
        .call("u", &calc, "calculate", json!({"expression": "1 / 0"}))
        .await;
    assert_eq!(
        reply.body["isError"], true,
        "a bad expression is a tool error: {}",
        reply.text
    );
    assert!(text_of(&reply.body).contains("division by zero"));

    let reply = app
        .call("u", &clock, "now", json!({"utcOffset": "+08:00"}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(text_of(&reply.body).ends_with("+08:00"), "{}", reply.text);

    let connections = app.connections().await;
    assert_eq!(connections.len(), 2, "{connections:?}");

    // The same checks as for other types.
    for (body, problem) in [
        (json!({"name": "x", "embedded": "teleporter"}), "teleporter"),
        (
            json!({"name": "x", "type": "embedded"}),
            "embedded is required",
        ),
        (
            json!({"name": "x", "embedded": "clock", "baseUrl": "https://example.com/mcp"}),
            "baseUrl",
        ),
    ] {
        let reply = app.create_server("u", body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(problem),
            "{}",
            reply.text
        );
    }
    // Switching type keeps nothing of the other transport.
    let switched = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{clock}"),
            Some(json!({"embedded": "calculator"})),
        )
        .await;
    assert_eq!(switched.body["embedded"], "calculator", "{}", switched.text);
    let reply = app.call("u", &clock, "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(
        text_of(&reply.body),
        "5",
        "the update restarted the connection"
    );
}
