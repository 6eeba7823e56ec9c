//! The console's server side over plain HTTP: sign-in, the session cookie on the admin and
//! user API with its CSRF rule, the admin event stream, the audit log (admin decisions,
//! filters, pages), a user's overview, recent calls and streamed tool calls. The browser
//! drives the same in `console_browser.rs`.

use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{COOKIE, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{ADMIN_KEY, Reply, TestApp, spawn_app_with, spawn_pool_app};
use crate::upstreams::eventually;

/// Signs in with `key`; the answer, and the cookie when it was set.
async fn sign_in(app: &TestApp, key: &str) -> (Reply, Option<String>) {
    let response = app
        .request(Method::POST, "/console/session")
        .json(&json!({"key": key}))
        .send()
        .await
        .unwrap();
    let cookie = response
        .headers()
        .get(SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_owned());
    (crate::helpers::into_reply(response).await, cookie)
}

/// The `name=value` part of a Set-Cookie header.
fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_owned()
}

/// A signed-in console: its cookie (`name=value`) and CSRF token.
async fn console_session(app: &TestApp) -> (String, String) {
    let (reply, cookie) = sign_in(app, ADMIN_KEY).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let token = reply.body["csrfToken"].as_str().unwrap().to_owned();
    (cookie_pair(&cookie.unwrap()), token)
}

async fn with_cookie(
    app: &TestApp,
    method: Method,
    path: &str,
    cookie: &str,
    csrf: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut request = app.request(method, path).header(COOKIE, cookie);
    if let Some(token) = csrf {
        request = request.header("X-CSRF-Token", token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    app.send_raw(request).await
}

#[tokio::test]
async fn only_an_admin_key_signs_in_and_the_cookie_is_http_only_and_same_site() {
    let app = spawn_pool_app().await;
    let page = app.send(Method::GET, "/console/", None, None, None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text.contains("/console/assets/app.js"));
    let policy = page.headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    let script = app
        .send(Method::GET, "/console/assets/app.js", None, None, None)
        .await;
    assert_eq!(script.status, StatusCode::OK);
    assert!(
        script.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );

    let (wrong, cookie) = sign_in(&app, "not-a-key-0000000000").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.code(), "UNAUTHORIZED");
    assert!(cookie.is_none());
    let (service, cookie) = sign_in(&app, &app.service_key).await;
    assert_eq!(service.status, StatusCode::FORBIDDEN, "{}", service.text);
    assert_eq!(service.code(), "FORBIDDEN");
    assert!(cookie.is_none());

    let (admin, cookie) = sign_in(&app, ADMIN_KEY).await;
    assert_eq!(admin.status, StatusCode::OK, "{}", admin.text);
    let cookie = cookie.expect("a session cookie");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(
        !cookie.contains(ADMIN_KEY),
        "the key is sealed, not in clear"
    );
    let session = with_cookie(
        &app,
        Method::GET,
        "/console/session",
        &cookie_pair(&cookie),
        None,
        None,
    )
    .await;
    assert_eq!(session.status, StatusCode::OK);
    assert_eq!(session.body["csrfToken"], admin.body["csrfToken"]);
    app.stop().await;
}

#[tokio::test]
async fn a_cookie_alone_reads_but_never_changes_state() {
    let app = spawn_pool_app().await;
    let (cookie, csrf) = console_session(&app).await;

    let read = with_cookie(&app, Method::GET, "/admin/keys", &cookie, None, None).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);

    let body = json!({"name": "made by a forged form", "role": "admin"});
    let forged = with_cookie(
        &app,
        Method::POST,
        "/admin/keys",
        &cookie,
        None,
        Some(body.clone()),
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.text);
    assert_eq!(forged.code(), "CSRF_TOKEN_INVALID");
    let wrong = with_cookie(
        &app,
        Method::POST,
        "/admin/keys",
        &cookie,
        Some("0123456789abcdef0123456789abcdef"),
        Some(body.clone()),
    )
    .await;
    assert_eq!(wrong.code(), "CSRF_TOKEN_INVALID");
    // User routes too: an admin acting for a user through the console.
    let user_write = app
        .send_raw(
            app.request(Method::POST, "/api/mcp-servers")
                .header(COOKIE, &cookie)
                .header("X-User-Id", "u")
                .json(&json!({"name": "x", "embedded": "clock"})),
        )
        .await;
    assert_eq!(user_write.code(), "CSRF_TOKEN_INVALID");
    let keys = app.admin(Method::GET, "/admin/keys", None).await;
    assert!(
        !keys.text.contains("forged"),
        "nothing was created: {}",
        keys.text
    );

    let made = with_cookie(
        &app,
        Method::POST,
        "/admin/keys",
        &cookie,
        Some(&csrf),
        Some(body),
    )
    .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);

    // Signing out needs the token too, then clears the cookie.
    let out = with_cookie(
        &app,
        Method::DELETE,
        "/console/session",
        &cookie,
        None,
        None,
    )
    .await;
    assert_eq!(out.code(), "CSRF_TOKEN_INVALID");
    let out = with_cookie(
        &app,
        Method::DELETE,
        "/console/session",
        &cookie,
        Some(&csrf),
        None,
    )
    .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert!(
        out.headers[SET_COOKIE.as_str()]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    // The session ended on the server: a copy of the cookie kept from before reads nothing.
    let kept = with_cookie(&app, Method::GET, "/admin/keys", &cookie, None, None).await;
    assert_eq!(kept.status, StatusCode::UNAUTHORIZED, "{}", kept.text);
    let session = with_cookie(&app, Method::GET, "/console/session", &cookie, None, None).await;
    assert_eq!(session.status, StatusCode::UNAUTHORIZED, "{}", session.text);
    assert!(session.text.contains("signed out"), "{}", session.text);
    // Another sign-in is a new session.
    let (fresh, _) = console_session(&app).await;
    let read = with_cookie(&app, Method::GET, "/admin/keys", &fresh, None, None).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text);
    app.stop().await;
}

#[tokio::test]
async fn a_session_ends_with_its_key_and_a_forged_cookie_is_refused() {
    let app = spawn_pool_app().await;
    let second = app
        .admin(
            Method::POST,
            "/admin/keys",
            Some(json!({"name": "second admin", "role": "admin"})),
        )
        .await;
    let key = second.body["key"].as_str().unwrap();
    let (reply, cookie) = sign_in(&app, key).await;
    assert_eq!(reply.status, StatusCode::OK);
    let cookie = cookie_pair(&cookie.unwrap());
    let ok = with_cookie(&app, Method::GET, "/admin/stats", &cookie, None, None).await;
    assert_eq!(ok.status, StatusCode::OK);

    let id = second.body["id"].as_str().unwrap();
    let revoked = app
        .admin(Method::DELETE, &format!("/admin/keys/{id}"), None)
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.text);
    let after = with_cookie(&app, Method::GET, "/admin/stats", &cookie, None, None).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED, "{}", after.text);

    let forged = with_cookie(
        &app,
        Method::GET,
        "/admin/stats",
        "mcp_pool_console=enc:v1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        None,
        None,
    )
    .await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(forged.code(), "UNAUTHORIZED");
    app.stop().await;
}

#[tokio::test]
async fn the_console_can_be_switched_off() {
    let app = spawn_app_with(|settings| settings.console.enabled = false).await;
    let page = app.send(Method::GET, "/console/", None, None, None).await;
    assert_eq!(page.status, StatusCode::NOT_FOUND);
    let (reply, cookie) = sign_in(&app, ADMIN_KEY).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(cookie.is_none());
    app.stop().await;
}

/// Reads server-sent events until one named `name` arrives (its data as JSON).
async fn next_event(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    buffer: &mut String,
    name: &str,
    matching: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let event = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("message");
            let data: String = block
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            if event == name
                && let Ok(value) = serde_json::from_str::<Value>(&data)
                && matching(&value)
            {
                return value;
            }
        }
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("no `{name}` event in time; saw: {buffer}"))
            .expect("the stream stays open")
            .unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn the_admin_stream_shows_connections_as_they_come_and_go() {
    let app = spawn_pool_app().await;
    for (key, status) in [
        (None, StatusCode::UNAUTHORIZED),
        (Some(app.service_key.clone()), StatusCode::FORBIDDEN),
    ] {
        let mut request = app.request(Method::GET, "/admin/events");
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let refused = app.send_raw(request).await;
        assert_eq!(refused.status, status, "{}", refused.text);
    }
    let (cookie, _) = console_session(&app).await;
    let response = app
        .request(Method::GET, "/admin/events")
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let stats = next_event(&mut stream, &mut buffer, "stats", |_| true).await;
    assert_eq!(stats["connections"]["total"], 0);
    next_event(&mut stream, &mut buffer, "calls", |c| {
        c["slots"].as_array().unwrap().len() == 90
    })
    .await;

    let server = app.stdio_fixture_ok("u").await;
    let call = app.call("u", &server, "echo", json!({"text": "hi"})).await;
    assert_eq!(call.status, StatusCode::OK, "{}", call.text);
    let connected = next_event(&mut stream, &mut buffer, "connection", |c| {
        c["state"] == "connected"
    })
    .await;
    assert_eq!(connected["userId"], "u");
    assert_eq!(connected["serverId"], server.as_str());
    next_event(&mut stream, &mut buffer, "stats", |s| {
        s["connections"]["stdio"] == 1
    })
    .await;

    let stopped = app
        .admin(
            Method::DELETE,
            &format!("/admin/connections/u/{server}"),
            None,
        )
        .await;
    assert_eq!(stopped.status, StatusCode::NO_CONTENT);
    let removed = next_event(&mut stream, &mut buffer, "connection.removed", |_| true).await;
    assert_eq!(
        removed,
        json!({"userId": "u", "serverId": server, "scope": null})
    );
    app.stop().await;
}

#[tokio::test]
async fn an_admins_decision_is_audited_as_theirs_and_the_log_filters_and_pages() {
    let app = spawn_pool_app().await;
    let server = app.fixture_for_a1(&["echo"]).await;
    app.run_echo_calls(7).await;
    // Two parked calls: one decided by the user's backend, one by an admin (support).
    let message = Uuid::new_v4().to_string();
    let parked = app
        .submit_calls(
            "u",
            &message,
            "",
            json!([
                {"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}},
                {"id": "c2", "name": "mcp__fx__add", "arguments": {"a": 3, "b": 4}}
            ]),
        )
        .await;
    assert_eq!(parked.status, StatusCode::ACCEPTED, "{}", parked.text);
    app.confirm_ok(&message, "c1", false).await;
    let by_admin = app
        .send(
            Method::POST,
            &format!("/api/messages/{message}/tool-confirm"),
            Some(ADMIN_KEY),
            Some("u"),
            Some(json!({"toolCallId": "c2", "approved": false})),
        )
        .await;
    assert_eq!(by_admin.status, StatusCode::OK, "{}", by_admin.text);

    let rejected = app
        .admin(Method::GET, "/admin/audit?outcome=rejected", None)
        .await;
    assert_eq!(rejected.status, StatusCode::OK, "{}", rejected.text);
    assert_eq!(
        rejected.body["total"], 1,
        "only the admin's decision: {}",
        rejected.text
    );
    let entry = &rejected.body["entries"][0];
    assert_eq!(entry["userId"], "u");
    assert_eq!(entry["toolName"], "add");
    assert_eq!(entry["messageId"], message.as_str());
    let keys = app.admin(Method::GET, "/admin/keys", None).await;
    let admin_key_id = keys.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["role"] == "admin")
        .unwrap()["id"]
        .clone();
    assert_eq!(entry["decidedBy"], admin_key_id);

    // Pages, newest first, without overlap.
    let first = app
        .admin(Method::GET, "/admin/audit?pageSize=5&userId=u", None)
        .await;
    assert_eq!(first.body["total"], 8, "{}", first.text);
    let second = app
        .admin(Method::GET, "/admin/audit?pageSize=5&page=1&userId=u", None)
        .await;
    let ids = |r: &Reply| -> Vec<String> {
        r.body["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&first).len(), 5);
    assert_eq!(ids(&second).len(), 3);
    assert!(ids(&second).iter().all(|id| !ids(&first).contains(id)));
    assert_eq!(
        first.body["entries"][0]["outcome"], "rejected",
        "newest first"
    );
    // Filters narrow.
    for (query, total) in [
        (format!("serverId={server}&outcome=done"), 7),
        ("tool=echo".to_owned(), 7),
        ("userId=someone-else".to_owned(), 0),
        ("from=2999-01-01T00:00:00Z".to_owned(), 0),
        ("to=2999-01-01T00:00:00Z".to_owned(), 8),
    ] {
        let page = app
            .admin(Method::GET, &format!("/admin/audit?{query}"), None)
            .await;
        assert_eq!(page.body["total"], total, "{query}: {}", page.text);
    }
    // Bad filters are refused, clearly.
    for (query, code) in [
        ("pageSize=0", "VALIDATION_ERROR"),
        ("pageSize=201", "VALIDATION_ERROR"),
        ("outcome=exploded", "VALIDATION_ERROR"),
        ("serverId=nope", "VALIDATION_ERROR"),
        (
            "from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z",
            "VALIDATION_ERROR",
        ),
        ("from=yesterday", "BAD_REQUEST"),
    ] {
        let refused = app
            .admin(Method::GET, &format!("/admin/audit?{query}"), None)
            .await;
        assert!(
            refused.status.is_client_error(),
            "{query}: {}",
            refused.text
        );
        assert_eq!(refused.code(), code, "{query}: {}", refused.text);
    }
    let service = app
        .send(
            Method::GET,
            "/admin/audit",
            Some(&app.service_key),
            None,
            None,
        )
        .await;
    assert_eq!(service.status, StatusCode::FORBIDDEN);
    app.stop().await;
}

#[tokio::test]
async fn a_users_overview_shows_assistants_token_names_and_open_calls_only() {
    let app = spawn_pool_app().await;
    let server = app.fixture_for_a1(&["echo"]).await;
    let token = app.gateway_token("u", "a1").await;
    let message = Uuid::new_v4().to_string();
    app.submit_calls(
        "u",
        &message,
        "",
        json!([
            {"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}},
            {"id": "c2", "name": "mcp__fx__echo", "arguments": {"text": "now"}}
        ]),
    )
    .await;
    eventually("the auto-approved call is done", || async {
        let read = app
            .user("u", Method::GET, &format!("/api/messages/{message}"), None)
            .await;
        read.body["toolCalls"][1]["status"] == "done"
    })
    .await;

    let overview = app.admin(Method::GET, "/admin/users/u", None).await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.text);
    assert_eq!(overview.body["assistants"][0]["id"], "a1");
    assert_eq!(overview.body["assistants"][0]["serverIds"], json!([server]));
    assert_eq!(
        overview.body["assistants"][0]["gatewayTokens"][0]["name"],
        "test"
    );
    assert!(!overview.text.contains(&token), "token names only");
    let open = &overview.body["openToolCalls"];
    assert_eq!(open.as_array().unwrap().len(), 1);
    assert_eq!(open[0]["messageId"], message.as_str());
    let calls = open[0]["toolCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "the auto-approved call is done: {open}");
    assert_eq!(calls[0]["id"], "c1");
    assert_eq!(calls[0]["status"], "pending");

    let nobody = app.admin(Method::GET, "/admin/users/nobody", None).await;
    assert_eq!(
        nobody.body,
        json!({"userId": "nobody", "assistants": [], "openToolCalls": []})
    );
    let bad = app.admin(Method::GET, "/admin/users/a%20b", None).await;
    assert_eq!(bad.code(), "INVALID_USER_ID");
    app.stop().await;
}

#[tokio::test]
async fn recent_calls_count_calls_errors_and_latency() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    for _ in 0..3 {
        let ok = app.call("u", &server, "echo", json!({"text": "hi"})).await;
        assert_eq!(ok.status, StatusCode::OK);
    }
    let bad = app.call("u", &server, "add", json!({"a": "x"})).await;
    assert_eq!(bad.code(), "INVALID_ARGUMENTS");
    let failed = app.call("u", &server, "fail", json!({})).await;
    assert_eq!(failed.body["isError"], true, "{}", failed.text);

    let recent = app.admin(Method::GET, "/admin/metrics/recent", None).await;
    assert_eq!(recent.status, StatusCode::OK);
    assert_eq!(recent.body["slotSeconds"], 10);
    let slots = recent.body["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 90, "15 minutes of 10-second slots");
    let calls: u64 = slots.iter().map(|s| s["calls"].as_u64().unwrap()).sum();
    assert_eq!(calls, 5);
    let count = |code: &str| -> u64 {
        slots
            .iter()
            .filter_map(|s| s["errors"][code].as_u64())
            .sum()
    };
    assert_eq!(count("INVALID_ARGUMENTS"), 1);
    assert_eq!(count("tool_error"), 1);
    let busy = slots
        .iter()
        .find(|s| s["calls"].as_u64() > Some(0))
        .unwrap();
    assert!(busy["p50Ms"].as_f64().unwrap() > 0.0);
    assert!(busy["p99Ms"].as_f64().unwrap() >= busy["p50Ms"].as_f64().unwrap());
    app.stop().await;
}

#[tokio::test]
async fn a_tool_call_can_stream_its_progress_before_its_result() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let call = |arguments: Value| {
        app.request(
            Method::POST,
            &format!("/api/mcp-servers/{server}/tools/progress/call"),
        )
        .bearer_auth(&app.service_key)
        .header("X-User-Id", "u")
        .header("Accept", "text/event-stream")
        .json(&json!({ "arguments": arguments }))
    };
    let response = call(json!({"steps": 3, "delayMs": 50}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = response.text().await.unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        names,
        ["progress", "progress", "progress", "result"],
        "{text}"
    );
    assert!(text.contains(r#""message":"step 2""#), "{text}");
    assert!(text.contains("done after 3 steps"), "{text}");

    // An error is an `error` event with the API's error body.
    let response = call(json!({"steps": "many"})).send().await.unwrap();
    let text = response.text().await.unwrap();
    assert!(text.starts_with("event: error"), "{text}");
    assert!(text.contains(r#""code":"INVALID_ARGUMENTS""#), "{text}");
    app.stop().await;
}
