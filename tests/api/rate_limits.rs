//! Per-user rate limits: 429 `RATE_LIMITED` with `Retry-After`, one user's budget never
//! spent by another.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::spawn_pool_app_with;

#[tokio::test]
async fn tool_calls_over_the_limit_get_429_with_retry_after_and_other_users_go_on() {
    let app = spawn_pool_app_with(|s| s.limits.tool_calls_per_minute = 3).await;
    let calculator = json!({"name": "calc", "type": "embedded", "embedded": "calculator"});
    let alice = app.create_server_ok("alice", calculator.clone()).await;
    let bob = app.create_server_ok("bob", calculator).await;
    for n in 0..3 {
        let reply = app
            .call("alice", &alice, "add", json!({"a": n, "b": 1}))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    let limited = app
        .call("alice", &alice, "add", json!({"a": 1, "b": 1}))
        .await;
    assert_eq!(
        limited.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        limited.text
    );
    assert_eq!(limited.code(), "RATE_LIMITED");
    let retry_after: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // One call of a 3-per-minute budget comes back every 20 s.
    assert!((1..=20).contains(&retry_after), "Retry-After {retry_after}");
    assert!(
        limited.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("3 per minute")),
        "{}",
        limited.text
    );
    let other = app.call("bob", &bob, "add", json!({"a": 2, "b": 2})).await;
    assert_eq!(other.status, StatusCode::OK, "{}", other.text);
}
