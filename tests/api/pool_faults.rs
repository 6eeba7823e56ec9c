//! Faults, limits and the lifecycle of connections, with real processes and sockets.

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::sync::Mutex;

use crate::helpers::{TestApp, spawn_pool_app, spawn_pool_app_with};
use crate::upstreams::{HttpUpstream, eventually, fixture_preset, process_exists, text_of};

/// `slow` running for `ms` in a task of its own, so the test can act while it runs.
fn spawn_slow_call(
    app: &TestApp,
    user: &str,
    server: &str,
    ms: u64,
) -> tokio::task::JoinHandle<reqwest::Response> {
    let request = reqwest::Client::new()
        .post(format!(
            "{}/api/mcp-servers/{server}/tools/slow/call",
            app.address
        ))
        .bearer_auth(&app.service_key)
        .header("X-User-Id", user)
        .json(&json!({"arguments": {"ms": ms}}));
    tokio::spawn(async move { request.send().await.unwrap() })
}

#[tokio::test]
async fn a_hanging_tool_times_out_and_the_connection_stays_usable() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "fixture", "timeoutSecs": 1}),
        )
        .await;
    let slow = app.call("u", &server, "slow", json!({"ms": 30000})).await;
    assert_eq!(slow.status, StatusCode::GATEWAY_TIMEOUT, "{}", slow.text);
    assert_eq!(slow.code(), "MCP_TIMEOUT");
    // The user's own server was slow: they are told so, not sent to a log they cannot read.
    assert!(
        slow.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("did not answer within 1s")),
        "{}",
        slow.text
    );
    let echo = app
        .call("u", &server, "echo", json!({"text": "still here"}))
        .await;
    assert_eq!(text_of(&echo.body), "still here");
}

#[tokio::test]
async fn a_killed_child_fails_the_call_fast_and_the_next_call_reconnects() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let pid = app.fixture_pid("u", &server).await;

    let in_flight = spawn_slow_call(&app, "u", &server, 60000);
    eventually("the slow call is running", || async {
        !in_flight.is_finished()
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();

    let response = in_flight.await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "MCP_CONNECTION_ERROR");

    let new_pid = app.fixture_pid("u", &server).await;
    assert_ne!(new_pid, pid, "a new process serves the next call");
    eventually("the killed child is reaped", || async {
        !process_exists(pid)
    })
    .await;
}

#[tokio::test]
async fn a_server_that_exits_is_restarted_on_next_use() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let pid = app.fixture_pid("u", &server).await;
    let crash = app.call("u", &server, "crash", json!({})).await;
    assert_eq!(crash.code(), "MCP_CONNECTION_ERROR", "{}", crash.text);
    // Why, in words: not that a transport closed, but how the server ended.
    let said = "the server exited with status 3";
    assert!(crash.text.contains(said), "{}", crash.text);
    let echo = app
        .call("u", &server, "echo", json!({"text": "back"}))
        .await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    assert_ne!(app.fixture_pid("u", &server).await, pid);
    let listed = app.connections().await;
    let causes: Vec<&str> = listed[0]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|change| change["cause"].as_str())
        .collect();
    assert!(causes.iter().any(|c| c.contains(said)), "{listed:?}");
}

#[tokio::test]
async fn a_vanished_http_server_is_detected_and_recovered_from() {
    let upstream = HttpUpstream::fixture(None).await;
    let port = upstream.port();
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    assert_eq!(
        app.call("u", &server, "echo", json!({"text": "a"}))
            .await
            .status,
        StatusCode::OK
    );

    upstream.kill().await;
    let failed = app.call("u", &server, "echo", json!({"text": "b"})).await;
    assert_eq!(failed.status, StatusCode::BAD_GATEWAY, "{}", failed.text);
    assert_eq!(failed.code(), "MCP_CONNECTION_ERROR");
    let connections = app.connections().await;
    assert_eq!(connections[0]["state"], "error", "{connections:?}");
    assert!(connections[0]["lastError"].is_string());

    // The server comes back on the same port: calls succeed again once the backoff allows.
    let _restarted = HttpUpstream::fixture(Some(port)).await;
    eventually("calls succeed again", || async {
        app.call("u", &server, "echo", json!({"text": "c"}))
            .await
            .status
            == StatusCode::OK
    })
    .await;
    assert_eq!(app.connections().await[0]["state"], "connected");
}

#[tokio::test]
async fn a_slow_call_does_not_block_other_calls_on_the_same_connection() {
    let app = Arc::new(spawn_pool_app().await);
    let server = app.stdio_fixture_ok("u").await;
    app.fixture_pid("u", &server).await;

    let finished = Arc::new(Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    for i in 0..20 {
        let (app, server, finished) = (app.clone(), server.clone(), finished.clone());
        calls.push(tokio::spawn(async move {
            let reply = if i == 0 {
                app.call("u", &server, "slow", json!({"ms": 3000})).await
            } else {
                app.call("u", &server, "echo", json!({"text": i.to_string()}))
                    .await
            };
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            finished.lock().await.push(i);
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    let order = finished.lock().await.clone();
    assert_eq!(order.len(), 20);
    assert_eq!(
        *order.last().unwrap(),
        0,
        "every quick call finished before the slow one: {order:?}"
    );
}

#[tokio::test]
async fn idle_connections_are_reaped_and_reconnected_transparently() {
    let app = spawn_pool_app_with(|s| s.pool.idle_timeout_secs = 1).await;
    let server = app.stdio_fixture_ok("u").await;
    let pid = app.fixture_pid("u", &server).await;
    assert_eq!(app.connections().await.len(), 1);

    eventually("the idle actor is gone", || async {
        app.connections().await.is_empty()
    })
    .await;
    eventually("its child process is killed and reaped", || async {
        !process_exists(pid)
    })
    .await;

    let echo = app
        .call("u", &server, "echo", json!({"text": "again"}))
        .await;
    assert_eq!(
        echo.status,
        StatusCode::OK,
        "reconnect-on-use is invisible: {}",
        echo.text
    );
    assert_eq!(text_of(&echo.body), "again");
}

#[tokio::test]
async fn two_users_get_separate_connections() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let alice = app
        .create_server_ok("alice", json!({"name": "fx", "preset": "fixture"}))
        .await;
    let bob = app
        .create_server_ok("bob", json!({"name": "fx", "preset": "fixture"}))
        .await;
    let alice_pid = app.fixture_pid("alice", &alice).await;
    let bob_pid = app.fixture_pid("bob", &bob).await;
    assert_ne!(alice_pid, bob_pid);

    let crossed = app.call("bob", &alice, "echo", json!({"text": "x"})).await;
    assert_eq!(
        (crossed.status, crossed.code()),
        (StatusCode::NOT_FOUND, "MCP_SERVER_NOT_FOUND")
    );
    for path in ["tools", "resources", "prompts"] {
        let reply = app
            .user(
                "bob",
                Method::GET,
                &format!("/api/mcp-servers/{alice}/{path}"),
                None,
            )
            .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
    }
    let health = app
        .user(
            "bob",
            Method::GET,
            &format!("/api/mcp/servers/{alice}/health"),
            None,
        )
        .await;
    assert_eq!(health.status, StatusCode::NOT_FOUND);

    // Alice's crash does not touch Bob's process.
    app.call("alice", &alice, "crash", json!({})).await;
    assert_eq!(app.fixture_pid("bob", &bob).await, bob_pid);
}

#[tokio::test]
async fn tools_list_changed_refreshes_the_cached_list() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let tools_path = format!("/api/mcp-servers/{server}/tools");
    let count = |body: &serde_json::Value| body["tools"].as_array().unwrap().len();
    let before = app.user("u", Method::GET, &tools_path, None).await;
    assert_eq!(count(&before.body), 13);
    assert_eq!(
        app.call("u", &server, "extra", json!({})).await.code(),
        "TOOL_NOT_FOUND"
    );

    app.call("u", &server, "notify", json!({})).await;
    eventually("the new tool is listed", || async {
        count(&app.user("u", Method::GET, &tools_path, None).await.body) == 14
    })
    .await;
    assert_eq!(
        text_of(&app.call("u", &server, "extra", json!({})).await.body),
        "extra"
    );
}

/// A 2026-07-28 server has no session stream: its list changes come on a
/// `subscriptions/listen` request the pool keeps open, and refresh the cached list as an
/// older server's notification does, whoever made the change.
#[tokio::test]
async fn a_2026_07_28_servers_list_change_refreshes_the_cached_list() {
    let upstream = crate::upstreams::HttpUpstream::fixture_with(&["--modern-only"]).await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "modern", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    let tools_path = format!("/api/mcp-servers/{server}/tools");
    let names = |body: &serde_json::Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let before = app.user("u", Method::GET, &tools_path, None).await;
    assert!(
        !names(&before.body).contains(&"extra".to_owned()),
        "{}",
        before.text
    );

    // Another client changes the list (here another user's connection; a change during
    // one of the pool's own calls would come on that call's answer stream anyway).
    let other = app
        .create_server_ok(
            "v",
            json!({"name": "modern", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    let notified = app.call("v", &other, "notify", json!({})).await;
    assert_eq!(notified.status, StatusCode::OK, "{}", notified.text);
    eventually("the new tool is listed", || async {
        names(&app.user("u", Method::GET, &tools_path, None).await.body)
            .contains(&"extra".to_owned())
    })
    .await;
}

#[tokio::test]
async fn connection_limits_answer_429() {
    let app = spawn_pool_app_with(|s| {
        s.pool.max_connections_per_user = 1;
        s.pool.max_stdio_processes = 2;
    })
    .await;
    app.create_preset_ok(fixture_preset()).await;
    let first = app
        .create_server_ok("u", json!({"name": "one", "preset": "fixture"}))
        .await;
    let second = app
        .create_server_ok("u", json!({"name": "two", "preset": "fixture"}))
        .await;
    app.fixture_pid("u", &first).await;
    let refused = app.call("u", &second, "echo", json!({"text": "x"})).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::TOO_MANY_REQUESTS, "CONNECTION_LIMIT_REACHED")
    );

    let other = app
        .create_server_ok("v", json!({"name": "one", "preset": "fixture"}))
        .await;
    app.fixture_pid("v", &other).await;
    let third = app
        .create_server_ok("w", json!({"name": "one", "preset": "fixture"}))
        .await;
    let refused = app.call("w", &third, "echo", json!({"text": "x"})).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::TOO_MANY_REQUESTS, "PROCESS_LIMIT_REACHED")
    );
}

#[tokio::test]
async fn changing_or_deleting_a_server_stops_its_process() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let pid = app.fixture_pid("u", &server).await;
    let update = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{server}"),
            Some(json!({"timeoutSecs": 5})),
        )
        .await;
    assert_eq!(update.status, StatusCode::OK);
    eventually("the old process is gone", || async { !process_exists(pid) }).await;
    let new_pid = app.fixture_pid("u", &server).await;
    assert_ne!(new_pid, pid);

    app.user(
        "u",
        Method::DELETE,
        &format!("/api/mcp-servers/{server}"),
        None,
    )
    .await;
    eventually("the process of a deleted server is gone", || async {
        !process_exists(new_pid)
    })
    .await;
    assert!(app.connections().await.is_empty());
}

#[tokio::test]
async fn admins_see_stop_and_refresh_connections() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let server = app
        .create_server_ok("alice", json!({"name": "fx", "preset": "fixture"}))
        .await;
    let pid = app.fixture_pid("alice", &server).await;

    let listed = app.connections().await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["userId"], "alice");
    assert_eq!(listed[0]["serverId"], server.as_str());
    assert_eq!(listed[0]["state"], "connected");
    assert_eq!(listed[0]["transport"], "stdio");
    assert_eq!(listed[0]["serverInfo"]["name"], "mcp-fixture");
    assert!(listed[0]["connectedAt"].is_string() && listed[0]["lastActiveAt"].is_string());

    let filtered = app
        .admin(Method::GET, "/admin/connections?userId=bob", None)
        .await;
    assert_eq!(filtered.body["count"], 0);
    let filtered = app
        .admin(
            Method::GET,
            "/admin/connections?userId=alice&state=connected",
            None,
        )
        .await;
    assert_eq!(filtered.body["count"], 1);
    let stats = app.admin(Method::GET, "/admin/stats", None).await;
    assert_eq!(stats.status, StatusCode::OK);
    assert_eq!(stats.body["connections"]["total"], 1);
    assert_eq!(stats.body["connections"]["connected"], 1);
    assert_eq!(stats.body["connections"]["stdio"], 1);

    let path = format!("/admin/connections/alice/{server}");
    let refreshed = app
        .admin(Method::POST, &format!("{path}/refresh"), None)
        .await;
    assert_eq!(refreshed.status, StatusCode::OK, "{}", refreshed.text);
    assert_eq!(refreshed.body["state"], "connected");

    let service_key = app.service_key.clone();
    let forbidden = app
        .send(Method::DELETE, &path, Some(&service_key), None, None)
        .await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
    let stopped = app.admin(Method::DELETE, &path, None).await;
    assert_eq!(stopped.status, StatusCode::NO_CONTENT);
    assert!(
        !process_exists(pid),
        "stopping waits until the child is gone"
    );
    let again = app.admin(Method::DELETE, &path, None).await;
    assert_eq!(
        (again.status, again.code()),
        (StatusCode::NOT_FOUND, "CONNECTION_NOT_FOUND")
    );
}

#[tokio::test]
async fn health_reports_healthy_and_unhealthy_servers() {
    let app = spawn_pool_app_with(|s| s.pool.connect_timeout_secs = 5).await;
    let good = app.stdio_fixture_ok("u").await;
    let health = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp/servers/{good}/health"),
            None,
        )
        .await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body["status"], "healthy");
    assert_eq!(health.body["connection"]["state"], "connected");

    let port = crate::upstreams::free_port();
    let bad = app
        .create_server_ok(
            "u",
            json!({"name": "down", "baseUrl": format!("http://127.0.0.1:{port}/mcp")}),
        )
        .await;
    let health = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp/servers/{bad}/health"),
            None,
        )
        .await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body["status"], "unhealthy");
    assert_eq!(health.body["error"]["code"], "MCP_CONNECTION_ERROR");
    let direct = app.connect("u", &bad).await;
    assert_eq!(direct.status, StatusCode::BAD_GATEWAY, "{}", direct.text);
    assert!(
        direct.headers.get("retry-after").is_some(),
        "backoff tells when to retry"
    );
}

#[tokio::test]
async fn shutting_down_kills_every_child() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let mut pids = Vec::new();
    for user in ["a", "b", "c"] {
        let server = app
            .create_server_ok(user, json!({"name": "fx", "preset": "fixture"}))
            .await;
        pids.push(app.fixture_pid(user, &server).await);
    }
    let _app = app.restart().await;
    for pid in pids {
        assert!(!process_exists(pid), "process {pid} outlived the service");
    }
}

#[tokio::test]
async fn a_call_in_flight_at_shutdown_finishes_then_its_process_is_gone() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let pid = app.fixture_pid("u", &server).await;
    let in_flight = spawn_slow_call(&app, "u", &server, 1500);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    app.begin_shutdown();
    // New requests are refused while the old one drains.
    eventually("new requests are refused", || async {
        reqwest::Client::new()
            .get(format!("{}/healthz", app.address))
            .send()
            .await
            .is_err()
    })
    .await;
    let response = in_flight.await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the call in flight was cut off"
    );
    app.stop().await;
    assert!(!process_exists(pid), "process {pid} outlived the service");
}

#[tokio::test]
async fn a_call_still_running_when_the_grace_ends_is_answered_503() {
    let app = spawn_pool_app_with(|s| s.server.shutdown_grace_secs = 1).await;
    let server = app.stdio_fixture_ok("u").await;
    let pid = app.fixture_pid("u", &server).await;
    let last_active = || async { app.connections().await[0]["lastActiveAt"].clone() };
    let idle_since = last_active().await;
    let in_flight = spawn_slow_call(&app, "u", &server, 30_000);
    eventually("the slow call has taken its connection", || async {
        last_active().await != idle_since
    })
    .await;
    app.begin_shutdown();
    let response = in_flight.await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "SHUTTING_DOWN", "{body}");
    app.stop().await;
    assert!(!process_exists(pid), "process {pid} outlived the service");
}

#[tokio::test]
async fn first_calls_racing_share_one_process() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    for user in ["a", "b", "c", "d"] {
        let server = app
            .create_server_ok(user, json!({"name": "fx", "preset": "fixture"}))
            .await;
        // The first calls arrive together, before any connection exists.
        let pids = futures::future::join_all((0..12).map(|_| app.fixture_pid(user, &server))).await;
        assert!(
            pids.iter().all(|pid| *pid == pids[0]),
            "{user}: one server ran as several processes: {pids:?}"
        );
        let closed = app
            .admin(
                Method::DELETE,
                &format!("/admin/connections/{user}/{server}"),
                None,
            )
            .await;
        assert_eq!(closed.status, StatusCode::NO_CONTENT, "{}", closed.text);
        let pid = pids[0];
        eventually("the closed connection's process is gone", || async move {
            !process_exists(pid)
        })
        .await;
    }
}

/// A server restarted between two uses (its sessions gone, so it would answer 404 for
/// the old one): the next call and listing go through on their first try, on a new
/// session.
#[tokio::test]
async fn a_server_that_forgot_the_session_gets_a_new_one_without_a_failed_call() {
    let port = crate::upstreams::free_port();
    let upstream = HttpUpstream::fixture(Some(port)).await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    assert_eq!(
        app.call("u", &server, "echo", json!({"text": "a"}))
            .await
            .status,
        StatusCode::OK
    );
    upstream.kill().await;
    let _restarted = HttpUpstream::fixture(Some(port)).await;
    let reply = app.call("u", &server, "echo", json!({"text": "b"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let listed = app
        .user(
            "u",
            reqwest::Method::GET,
            &format!("/api/mcp-servers/{server}/tools"),
            None,
        )
        .await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
}
