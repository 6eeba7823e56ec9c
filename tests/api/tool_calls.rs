//! Seed 001's confirmation flow: tool calls of a message run at once or wait for the user.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{TestApp, spawn_pool_app, spawn_pool_app_with};
use crate::upstreams::eventually;

/// A user `u` with the fixture bound to assistant `a1`; `echo` and `big` are auto-approved.
async fn setup(app: &TestApp) {
    app.fixture_for_a1(&["echo", "big"]).await;
}

async fn submit(
    app: &TestApp,
    user: &str,
    message: &str,
    query: &str,
    calls: Value,
) -> crate::helpers::Reply {
    app.submit_calls(user, message, query, calls).await
}

/// Parks one call `c1` (`add` is not auto-approved) on the message.
async fn park_add(app: &TestApp, message: &str) {
    let reply = submit(
        app,
        "u",
        message,
        "",
        json!([{"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}}]),
    )
    .await;
    assert_eq!(
        reply.body["toolCalls"][0]["status"], "pending",
        "{}",
        reply.text
    );
}

#[tokio::test]
async fn auto_approved_calls_run_at_once_and_are_stored() {
    let app = spawn_pool_app().await;
    setup(&app).await;
    let message = Uuid::new_v4().to_string();
    let reply = submit(
        &app,
        "u",
        &message,
        "?wait=20",
        json!([{"id": "c1", "name": "mcp__fx__echo", "arguments": {"text": "hi"}}]),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let call = &reply.body["toolCalls"][0];
    assert_eq!(call["status"], "done");
    assert_eq!(call["response"][0]["text"], "hi");
    assert_eq!(call["isError"], false);
    assert_eq!(call["serverName"], "fx");
    assert_eq!(call["toolName"], "echo");
    assert_eq!(call["displayName"], "mcp__fx__echo");
    let stored = app.call_record(&message, "c1").await;
    assert_eq!(
        &stored, call,
        "GET /api/messages/{{id}} returns the stored record"
    );
    let audit = app.admin(Method::GET, "/admin/audit?userId=u", None).await;
    assert_eq!(audit.body["total"], 1, "{}", audit.text);
    assert_eq!(audit.body["entries"][0]["toolName"], "echo");
}

#[tokio::test]
async fn parked_calls_wait_for_approval_or_rejection() {
    let app = spawn_pool_app().await;
    setup(&app).await;
    let message = Uuid::new_v4().to_string();
    let reply = submit(
        &app,
        "u",
        &message,
        "",
        json!([
            {"id": "add", "name": "mcp__fx__add", "arguments": {"a": 2, "b": 3}},
            {"id": "env", "name": "mcp__fx__env", "arguments": "{\"name\": \"HOME\"}"},
            {"id": "echo", "name": "mcp__fx__echo", "arguments": {"text": "now"}}
        ]),
    )
    .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
    assert_eq!(reply.body["toolCalls"][0]["status"], "pending");
    assert_eq!(
        reply.body["toolCalls"][1]["arguments"],
        json!({"name": "HOME"}),
        "string arguments are parsed"
    );
    eventually("the auto-approved call is done", || async {
        app.call_record(&message, "echo").await["status"] == "done"
    })
    .await;
    assert_eq!(
        app.call_record(&message, "add").await["status"],
        "pending",
        "calls settle independently"
    );

    let approved = app.confirm("u", &message, "add", true).await;
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.text);
    assert!(matches!(
        approved.body["toolCall"]["status"].as_str(),
        Some("invoking" | "done")
    ));
    eventually("the approved call is done", || async {
        app.call_record(&message, "add").await["status"] == "done"
    })
    .await;
    assert_eq!(
        app.call_record(&message, "add").await["response"][0]["text"],
        "5"
    );

    let rejected = app.confirm("u", &message, "env", false).await;
    assert_eq!(rejected.body["toolCall"]["status"], "cancelled");
    assert!(
        rejected.body["toolCall"]["response"]
            .as_str()
            .unwrap()
            .contains("rejected")
    );
    assert_eq!(rejected.body["toolCall"]["isError"], true);

    let again = app.confirm("u", &message, "env", true).await;
    assert_eq!(
        (again.status, again.code()),
        (StatusCode::CONFLICT, "TOOL_CALL_SETTLED")
    );
    let unknown = app.confirm("u", &message, "nope", true).await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "TOOL_CALL_NOT_FOUND")
    );
}

#[tokio::test]
async fn unapproved_calls_are_cancelled_after_the_timeout() {
    let app = spawn_pool_app_with(|s| s.confirmation.timeout_secs = 1).await;
    setup(&app).await;
    let message = Uuid::new_v4().to_string();
    let reply = submit(
        &app,
        "u",
        &message,
        "?wait=20",
        json!([{"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 1}}]),
    )
    .await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "the wait ends when the timeout settles it: {}",
        reply.text
    );
    let call = &reply.body["toolCalls"][0];
    assert_eq!(call["status"], "cancelled");
    assert!(call["response"].as_str().unwrap().contains("No approval"));
}

#[tokio::test]
async fn of_concurrent_approvals_exactly_one_wins() {
    let app = Arc::new(spawn_pool_app().await);
    setup(&app).await;
    let message = Uuid::new_v4().to_string();
    park_add(&app, &message).await;
    let attempts: Vec<_> = (0..10)
        .map(|_| {
            let (app, message) = (app.clone(), message.clone());
            tokio::spawn(async move { app.confirm("u", &message, "c1", true).await.status })
        })
        .collect();
    let mut statuses = Vec::new();
    for attempt in attempts {
        statuses.push(attempt.await.unwrap());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::CONFLICT)
            .count(),
        9,
        "{statuses:?}"
    );
    eventually("it ran once", || async {
        app.call_record(&message, "c1").await["status"] == "done"
    })
    .await;
    let audit = app.admin(Method::GET, "/admin/audit?userId=u", None).await;
    assert_eq!(audit.body["total"], 1, "ran once, one row: {}", audit.text);
}

#[tokio::test]
async fn bad_calls_become_error_records_the_model_can_read() {
    let app = spawn_pool_app_with(|s| s.limits.max_result_bytes = 300).await;
    setup(&app).await;
    let message = Uuid::new_v4().to_string();
    let reply = submit(
        &app,
        "u",
        &message,
        "?wait=20",
        json!([
            {"id": "unknown", "name": "mcp__fx__nope", "arguments": {}},
            {"id": "split", "name": "mcp__fx", "arguments": {}},
            {"id": "invalid", "name": "mcp__fx__echo", "arguments": {"text": 5}},
            {"id": "broken", "name": "mcp__fx__echo", "arguments": "{not json"},
            {"id": "big", "name": "mcp__fx__big", "arguments": {"bytes": 5000}}
        ]),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let calls = reply.body["toolCalls"].as_array().unwrap();
    for call in &calls[..4] {
        assert_eq!(call["status"], "error", "{call}");
        assert_eq!(call["isError"], true);
    }
    assert!(
        calls[2]["response"]["details"][0]
            .as_str()
            .unwrap()
            .contains("/text")
    );
    let big = calls[4]["response"][0]["text"].as_str().unwrap();
    assert!(
        big.contains("[truncated: the result was") && big.len() < 400,
        "{big}"
    );

    let duplicate = submit(
        &app,
        "u",
        &message,
        "",
        json!([{"id": "big", "name": "mcp__fx__echo", "arguments": {"text": "x"}}]),
    )
    .await;
    assert_eq!(
        (duplicate.status, duplicate.code()),
        (StatusCode::CONFLICT, "CONFLICT")
    );
    let not_uuid = submit(
        &app,
        "u",
        "msg-1",
        "",
        json!([{"id": "a", "name": "mcp__fx__echo", "arguments": {"text": "x"}}]),
    )
    .await;
    assert_eq!(not_uuid.status, StatusCode::UNPROCESSABLE_ENTITY);
    let empty = submit(&app, "u", &Uuid::new_v4().to_string(), "", json!([])).await;
    assert_eq!(empty.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn a_conversation_is_created_for_its_owner_and_hidden_from_others() {
    let app = spawn_pool_app().await;
    setup(&app).await;
    let conversation = Uuid::new_v4().to_string();
    let with_conversation = |user: &'static str| {
        let conversation = conversation.clone();
        let app = &app;
        async move {
            app.user(
                user,
                Method::POST,
                &format!("/api/messages/{}/tool-calls?wait=20", Uuid::new_v4()),
                Some(json!({"assistantId": "a1", "conversationId": conversation,
                            "calls": [{"id": "c1", "name": "mcp__fx__echo", "arguments": {"text": "x"}}]})),
            )
            .await
        }
    };
    assert_eq!(with_conversation("u").await.status, StatusCode::OK);
    assert_eq!(
        with_conversation("u").await.status,
        StatusCode::OK,
        "reusing it is fine"
    );
    let other = with_conversation("mallory").await;
    assert_eq!(
        (other.status, other.code()),
        (StatusCode::NOT_FOUND, "CONVERSATION_NOT_FOUND")
    );
}

#[tokio::test]
async fn another_users_message_is_not_found() {
    let app = spawn_pool_app().await;
    setup(&app).await;
    let message = Uuid::new_v4().to_string();
    park_add(&app, &message).await;
    let read = app
        .user(
            "mallory",
            Method::GET,
            &format!("/api/messages/{message}"),
            None,
        )
        .await;
    assert_eq!(
        (read.status, read.code()),
        (StatusCode::NOT_FOUND, "MESSAGE_NOT_FOUND")
    );
    let approve = app.confirm("mallory", &message, "c1", true).await;
    assert_eq!(approve.status, StatusCode::NOT_FOUND);
    let hijack = submit(
        &app,
        "mallory",
        &message,
        "",
        json!([{"id": "c2", "name": "mcp__fx__echo", "arguments": {"text": "x"}}]),
    )
    .await;
    assert_eq!(hijack.status, StatusCode::NOT_FOUND, "{}", hijack.text);
    assert_eq!(
        app.call_record(&message, "c1").await["status"],
        "pending",
        "untouched"
    );
}

#[tokio::test]
async fn a_stop_cancels_parked_calls_with_a_reason() {
    let app = spawn_pool_app().await;
    setup(&app).await;
    let message = Uuid::new_v4().to_string();
    park_add(&app, &message).await;
    let app = app.restart().await;
    let call = app.call_record(&message, "c1").await;
    assert_eq!(call["status"], "cancelled");
    assert_eq!(
        call["response"],
        "cancelled: the service stopped before this call was approved"
    );
    let late = app.confirm("u", &message, "c1", true).await;
    assert_eq!(late.code(), "TOOL_CALL_SETTLED");
}

/// Reads `assistant.toolCall.updated` events (id, record) from an SSE response.
async fn next_events(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    buffer: &mut String,
    want: usize,
) -> Vec<(u64, Value)> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while events.len() < want {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
            };
            if field("event:").as_deref() == Some("assistant.toolCall.updated") {
                let id = field("id:").unwrap().parse().unwrap();
                let data: Value = serde_json::from_str(&field("data:").unwrap()).unwrap();
                events.push((id, data));
            }
        }
        if events.len() >= want {
            break;
        }
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("events arrive")
            .unwrap()
            .unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
    events
}

#[tokio::test]
async fn the_event_stream_carries_every_change_in_order_and_resumes() {
    let app = spawn_pool_app().await;
    setup(&app).await;
    let open = |last: Option<u64>| {
        let mut request = app
            .request(Method::GET, "/api/events")
            .bearer_auth(&app.service_key)
            .header("X-User-Id", "u");
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last.to_string());
        }
        request.send()
    };
    let response = open(None).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();

    let message = Uuid::new_v4().to_string();
    park_add(&app, &message).await;
    app.confirm("u", &message, "c1", true).await;
    let events = next_events(&mut stream, &mut buffer, 3).await;
    let statuses: Vec<&str> = events
        .iter()
        .map(|(_, e)| e["toolCall"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["pending", "invoking", "done"]);
    assert!(
        events
            .iter()
            .all(|(_, e)| e["messageId"] == message.as_str())
    );
    assert!(events.windows(2).all(|w| w[0].0 < w[1].0), "ids increase");

    let mut resumed = open(Some(events[0].0)).await.unwrap().bytes_stream();
    let mut buffer = String::new();
    let replayed = next_events(&mut resumed, &mut buffer, 2).await;
    assert_eq!(
        replayed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![events[1].0, events[2].0]
    );

    let other = app
        .request(Method::GET, "/api/events")
        .bearer_auth(&app.service_key)
        .header("X-User-Id", "mallory")
        .header("Last-Event-ID", "0")
        .send()
        .await
        .unwrap();
    let mut other = other.bytes_stream();
    let quiet = tokio::time::timeout(Duration::from_millis(500), other.next()).await;
    assert!(
        quiet.is_err()
            || !String::from_utf8_lossy(&quiet.unwrap().unwrap().unwrap()).contains("toolCall"),
        "another user sees nothing"
    );
}
