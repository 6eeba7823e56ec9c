//! Several instances on one database, as behind a load balancer: a start or a crash
//! settles only what stopped instances held, an approval reaching the wrong instance
//! still finds its parked call, and changes made on one instance reach the others.
//!
//! On SQLite the instances share the database file but cannot talk to each other
//! (PostgreSQL NOTIFY); the tests then check what a user sees instead.

use std::time::Duration;

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use uuid::Uuid;

use crate::helpers::{TestApp, as_user, spawn_pool_app_with};
use crate::logging::Binary;
use crate::upstreams::eventually;

/// Quick heartbeats, so a dead instance is noticed within seconds (but not so quick that
/// a loaded test machine makes a live one look dead).
pub fn fast_heartbeat(settings: &mut mcp_pool::Settings) {
    settings.cluster.heartbeat_secs = 1;
    settings.cluster.instance_ttl_secs = 5;
}

/// Another instance of `app` (same database, encryption key, heartbeat and URL policy)
/// as a process of its own, so that a test can kill it.
pub async fn another_process(app: &TestApp) -> Binary {
    let settings = &app.settings;
    crate::logging::start_binary(&[
        (
            "MCP_POOL__STORAGE__DATA_DIR",
            &settings.storage.data_dir.display().to_string(),
        ),
        ("DATABASE_URL", settings.database.url.expose_secret()),
        (
            "MCP_POOL__CLUSTER__HEARTBEAT_SECS",
            &settings.cluster.heartbeat_secs.to_string(),
        ),
        (
            "MCP_POOL__CLUSTER__INSTANCE_TTL_SECS",
            &settings.cluster.instance_ttl_secs.to_string(),
        ),
        (
            "MCP_POOL__SECURITY__ALLOW_LOOPBACK_URLS",
            &settings.security.allow_loopback_urls.to_string(),
        ),
    ])
    .await
}

/// User `u` with the fixture bound to assistant `a1`; `echo` runs without approval.
async fn setup(app: &TestApp) -> String {
    app.fixture_for_a1(&["echo"]).await
}

/// Parks `c1` (`add` needs approval) on a new message through `base`.
async fn park_add(app: &TestApp, base: &str) -> String {
    park_add_with(&app.service_key, base).await
}

/// [`park_add`] with the service key `key`.
async fn park_add_with(key: &str, base: &str) -> String {
    let message = Uuid::new_v4().to_string();
    let reply = reqwest::Client::new()
        .post(format!("{base}/api/messages/{message}/tool-calls"))
        .bearer_auth(key)
        .header("X-User-Id", "u")
        .json(&json!({"assistantId": "a1", "calls": [
            {"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}}]}))
        .send()
        .await
        .unwrap();
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["toolCalls"][0]["status"], "pending", "{body}");
    message
}

async fn record(app: &TestApp, message: &str) -> Value {
    let reply = app
        .user("u", Method::GET, &format!("/api/messages/{message}"), None)
        .await;
    reply.body["toolCalls"][0].clone()
}

#[tokio::test]
async fn a_starting_instance_leaves_calls_parked_on_a_live_one_alone() {
    let a = spawn_pool_app_with(fast_heartbeat).await;
    setup(&a).await;
    let message = park_add(&a, &a.address).await;

    let b = a.another_instance().await;
    // B settled what it found orphaned when it started and sweeps every second; it shares
    // A's data directory, where A's presence lock tells it A is alive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(record(&b, &message).await["status"], "pending");

    a.confirm_ok(&message, "c1", true).await;
    eventually("the call ran on the instance holding it", || async {
        record(&b, &message).await["status"] == "done"
    })
    .await;
    assert_eq!(record(&a, &message).await["response"][0]["text"], "3");
}

#[tokio::test]
async fn the_calls_of_a_crashed_instance_are_settled_by_a_live_one() {
    let b = spawn_pool_app_with(fast_heartbeat).await;
    setup(&b).await;
    let mut a = another_process(&b).await;
    let message = park_add(&b, &a.base).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        record(&b, &message).await["status"],
        "pending",
        "held by a live instance"
    );

    a.child.kill().await.unwrap();
    eventually("the crashed instance's call is settled", || async {
        record(&b, &message).await["status"] == "cancelled"
    })
    .await;
    let call = record(&b, &message).await;
    assert_eq!(
        call["response"],
        "interrupted: the service instance holding this call stopped"
    );
    let late = b.confirm("u", &message, "c1", true).await;
    assert_eq!(late.code(), "TOOL_CALL_SETTLED");
}

/// A process killed on this host is known dead by the next one on its data directory
/// the moment that one starts (it held a lock there that died with it): the heartbeat
/// timeout (a minute here) plays no part, and the calls are settled before it serves.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_restarted_instance_settles_the_calls_of_its_killed_predecessor_at_once() {
    let long_ttl = |settings: &mut mcp_pool::Settings| settings.cluster.instance_ttl_secs = 60;
    let app = spawn_pool_app_with(long_ttl).await;
    setup(&app).await;
    let binary = app
        .stop_for_binary(&[("MCP_POOL__CLUSTER__INSTANCE_TTL_SECS", "60")])
        .await;
    let (key, env) = (&binary.service_key, binary.vars());
    let mut first = crate::logging::start_binary(&env).await;
    let message = park_add_with(key, &first.base).await;
    first.child.kill().await.unwrap();

    let second = crate::logging::start_binary(&env).await;
    let stored = as_user(
        key,
        Method::GET,
        format!("{}/api/messages/{message}", second.base),
        None,
    )
    .await
    .body;
    let call = &stored["toolCalls"][0];
    assert_eq!(call["status"], "cancelled", "{stored}");
    assert_eq!(
        call["response"],
        "interrupted: the service instance holding this call stopped"
    );
    let late = as_user(
        key,
        Method::POST,
        format!("{}/api/messages/{message}/tool-confirm", second.base),
        Some(json!({"toolCallId": "c1", "approved": true})),
    )
    .await;
    assert_eq!(
        (late.status, late.body["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("TOOL_CALL_SETTLED")),
        "{}",
        late.body
    );
}

#[tokio::test]
async fn an_instance_whose_message_was_taken_over_stops_writing_it() {
    let a = spawn_pool_app_with(fast_heartbeat).await;
    setup(&a).await;
    let message = park_add(&a, &a.address).await;
    // What another instance does when it believes A is dead: it takes the message over.
    // The new owner's id is one no instance has (the message's own, stored the same way
    // on either database), so it is dead as well.
    a.raw_execute("UPDATE messages SET owner_instance = id WHERE open_calls > 0")
        .await;

    let refused = a.confirm("u", &message, "c1", true).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "HELD_ELSEWHERE"),
        "{}",
        refused.text
    );
    assert_eq!(
        record(&a, &message).await["status"],
        "pending",
        "nothing written"
    );
    // The stale actor stopped; asking again takes the message back from the dead owner.
    a.confirm_ok(&message, "c1", true).await;
    eventually("the call ran", || async {
        record(&a, &message).await["status"] == "done"
    })
    .await;
}

/// `assistant.toolCall.updated` statuses read from an event stream, until `want` came.
async fn statuses(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    want: usize,
) -> Vec<String> {
    let mut buffer = String::new();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.len() < want {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("only {seen:?} arrived"))
            .expect("the stream is open")
            .unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data:")) {
                let event: Value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                if let Some(status) = event["toolCall"]["status"].as_str() {
                    seen.push(status.to_owned());
                }
            }
        }
    }
    seen
}

#[tokio::test]
async fn an_approval_reaching_another_instance_runs_the_call_where_it_is_parked() {
    let a = spawn_pool_app_with(fast_heartbeat).await;
    let b = a.another_instance().await;
    setup(&a).await;
    let events = b
        .request(Method::GET, "/api/events")
        .bearer_auth(&b.service_key)
        .header("X-User-Id", "u")
        .send()
        .await
        .unwrap();
    let mut events = events.bytes_stream();
    let message = park_add(&a, &a.address).await;

    let approve = b.confirm("u", &message, "c1", true).await;
    if !b.on_postgres() {
        // SQLite: the instances cannot reach each other; nothing runs twice or is lost.
        assert_eq!(
            (approve.status, approve.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "HELD_ELSEWHERE"),
            "{}",
            approve.text
        );
        assert_eq!(record(&a, &message).await["status"], "pending");
        a.confirm_ok(&message, "c1", true).await;
        return;
    }
    assert_eq!(approve.status, StatusCode::OK, "{}", approve.text);
    assert!(
        ["invoking", "done"].contains(
            &approve.body["toolCall"]["status"]
                .as_str()
                .unwrap_or_default()
        ),
        "{}",
        approve.text
    );
    eventually("the call ran", || async {
        record(&a, &message).await["status"] == "done"
    })
    .await;
    let again = b.confirm("u", &message, "c1", false).await;
    assert_eq!(again.code(), "TOOL_CALL_SETTLED", "{}", again.text);
    let other = b.confirm("mallory", &message, "c1", true).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND, "{}", other.text);

    // B's stream saw every change A made, in order.
    assert_eq!(
        statuses(&mut events, 3).await,
        ["pending", "invoking", "done"]
    );
}

#[tokio::test]
async fn a_server_changed_on_one_instance_reconnects_on_the_others() {
    let a = spawn_pool_app_with(fast_heartbeat).await;
    let b = a.another_instance().await;
    let server = setup(&a).await;
    let before = a.fixture_pid("u", &server).await;
    let update = b
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{server}"),
            Some(json!({"name": "fx", "preset": "fixture", "autoApproveTools": ["echo", "add"]})),
        )
        .await;
    assert_eq!(update.status, StatusCode::OK, "{}", update.text);
    if !a.on_postgres() {
        return; // Without notes A keeps its connection until it is idle or fails.
    }
    eventually("A closed its connection to the changed server", || async {
        a.connections().await.is_empty()
    })
    .await;
    assert_ne!(a.fixture_pid("u", &server).await, before, "a fresh process");
}

#[tokio::test]
async fn a_bridge_runs_on_one_instance_and_moves_when_that_one_stops() {
    let a = spawn_pool_app_with(fast_heartbeat).await;
    let b = a.another_instance().await;
    setup(&a).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let put = a
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a1/xiaozhi",
            Some(json!({"endpoint": format!("ws://127.0.0.1:{port}/mcp/?token=t")})),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    let (first, _) = tokio::time::timeout(Duration::from_secs(15), listener.accept())
        .await
        .expect("the bridge connects")
        .unwrap();
    let _first = tokio_tungstenite::accept_async(first).await.unwrap();
    // Several heartbeats: B must not dial in as well.
    let second = tokio::time::timeout(Duration::from_secs(3), listener.accept()).await;
    assert!(second.is_err(), "only the owning instance runs the bridge");
    let status = b
        .user("u", Method::GET, "/api/assistants/a1/xiaozhi", None)
        .await;
    assert_eq!(
        status.body["status"]["state"], "elsewhere",
        "{}",
        status.text
    );

    a.stop().await;
    let (taken_over, _) = tokio::time::timeout(Duration::from_secs(15), listener.accept())
        .await
        .expect("the other instance takes the bridge over")
        .unwrap();
    let _taken_over = tokio_tungstenite::accept_async(taken_over).await.unwrap();
    eventually("B reports the bridge as its own", || async {
        let status = b
            .user("u", Method::GET, "/api/assistants/a1/xiaozhi", None)
            .await;
        status.body["status"]["state"] != "elsewhere"
    })
    .await;
}
