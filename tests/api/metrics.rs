//! `GET /metrics`: what an operator's Prometheus scrapes, after real calls to a real server.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_pool_app;
use crate::upstreams::fixture_preset;

/// The value of one exposition line, `name{labels} value`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test]
async fn calls_connections_caches_and_requests_are_counted_without_tenant_ids() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let server = app
        .create_server_ok(
            "metrics-user",
            json!({"name": "fx", "preset": "fixture", "timeoutSecs": 1}),
        )
        .await;
    for text in ["one", "two"] {
        let reply = app
            .call("metrics-user", &server, "echo", json!({"text": text}))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    let failed = app.call("metrics-user", &server, "fail", json!({})).await;
    assert_eq!(failed.status, StatusCode::OK, "{}", failed.text);
    let slow = app
        .call("metrics-user", &server, "slow", json!({"ms": 5000}))
        .await;
    assert_eq!(slow.code(), "MCP_TIMEOUT", "{}", slow.text);

    let scrape = app.send(Method::GET, "/metrics", None, None, None).await;
    assert_eq!(scrape.status, StatusCode::OK);
    let text = scrape.text;
    let calls = |outcome: &str| {
        sample(
            &text,
            &format!(
                "mcp_pool_tool_call_duration_seconds_count{{transport=\"stdio\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(calls("ok"), Some(2.0), "{text}");
    assert_eq!(calls("tool_error"), Some(1.0), "{text}");
    assert_eq!(calls("MCP_TIMEOUT"), Some(1.0), "{text}");
    assert_eq!(
        sample(
            &text,
            "mcp_pool_upstream_connects_total{transport=\"stdio\",kind=\"connect\",outcome=\"ok\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mcp_pool_connection_actors{state=\"connected\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mcp_pool_stdio_connections"),
        Some(1.0),
        "{text}"
    );
    let tool_lists = |result: &str| {
        sample(
            &text,
            &format!(
                "mcp_pool_catalog_cache_lookups_total{{catalog=\"tools\",result=\"{result}\"}}"
            ),
        )
        .unwrap_or(0.0)
    };
    assert_eq!(tool_lists("miss"), 1.0, "{text}");
    assert!(tool_lists("hit") >= 3.0, "{text}");
    assert_eq!(
        sample(
            &text,
            "mcp_pool_http_request_duration_seconds_count{method=\"POST\",route=\"/api/mcp-servers/{id}/tools/{tool}/call\",status=\"200\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert!(
        !text.contains("metrics-user") && !text.contains(&server),
        "{text}"
    );
}

#[tokio::test]
async fn parked_calls_are_counted_until_each_is_approved_or_rejected() {
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "calc", "type": "embedded", "embedded": "calculator"}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    let message = uuid::Uuid::new_v4();
    let parked = app
        .user(
            "u",
            Method::POST,
            &format!("/api/messages/{message}/tool-calls"),
            Some(json!({"assistantId": "a1", "calls": [
                {"id": "c1", "name": "mcp__calc__add", "arguments": {"a": 1, "b": 2}},
                {"id": "c2", "name": "mcp__calc__add", "arguments": {"a": 3, "b": 4}}
            ]})),
        )
        .await;
    assert_eq!(
        parked.body["toolCalls"][1]["status"], "pending",
        "{}",
        parked.text
    );
    let parked_now = || async {
        let text = app
            .send(Method::GET, "/metrics", None, None, None)
            .await
            .text;
        (
            sample(&text, "mcp_pool_parked_tool_calls"),
            sample(&text, "mcp_pool_confirmation_actors"),
        )
    };
    assert_eq!(parked_now().await, (Some(2.0), Some(1.0)));
    for (call, approved) in [("c1", false), ("c2", true)] {
        app.confirm_ok(&message.to_string(), call, approved).await;
    }
    assert_eq!(parked_now().await.0, Some(0.0));
}
