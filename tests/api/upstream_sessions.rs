//! An upstream's streamable-HTTP session lives as long as its connection: ended with
//! DELETE when the connection stops, opened again (and the request sent again) when the
//! server has forgotten it (404), without the caller noticing. Sessions are a matter of
//! servers of 2025-11-25 and older (`--legacy-only`); a server that also speaks 2026-07-28
//! is spoken to in it, without sessions.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app};
use crate::upstreams::{HttpUpstream, eventually};

async fn sessions(upstream: &HttpUpstream) -> Value {
    reqwest::get(format!("{}/fixture/sessions", upstream.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn fixture_server(app: &TestApp, upstream: &HttpUpstream) -> String {
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    let echo = app.call("u", &server, "echo", json!({"text": "a"})).await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    assert_eq!(sessions(upstream).await["live"], 1);
    server
}

#[tokio::test]
async fn a_stopped_connection_ends_its_upstream_session() {
    let upstream = HttpUpstream::fixture_with(&["--legacy-only"]).await;
    let app = spawn_pool_app().await;
    let server = fixture_server(&app, &upstream).await;

    let stopped = app
        .admin(
            Method::DELETE,
            &format!("/admin/connections/u/{server}"),
            None,
        )
        .await;
    assert_eq!(stopped.status, StatusCode::NO_CONTENT, "{}", stopped.text);
    eventually("the upstream session is deleted", || async {
        sessions(&upstream).await == json!({"live": 0, "deleted": 1})
    })
    .await;

    // So does a connection whose server definition changed (it reconnects afresh).
    let echo = app.call("u", &server, "echo", json!({"text": "b"})).await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    let updated = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{server}"),
            Some(json!({"timeoutSecs": 20})),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.text);
    eventually("the old session is deleted", || async {
        sessions(&upstream).await == json!({"live": 0, "deleted": 2})
    })
    .await;
}

#[tokio::test]
async fn a_forgotten_upstream_session_is_opened_again_and_the_call_succeeds() {
    let upstream = HttpUpstream::fixture_with(&["--legacy-only"]).await;
    let app = spawn_pool_app().await;
    let server = fixture_server(&app, &upstream).await;

    let forgot = reqwest::Client::new()
        .post(format!("{}/fixture/sessions/forget", upstream.base))
        .send()
        .await
        .unwrap();
    assert_eq!(forgot.status(), StatusCode::NO_CONTENT);
    assert_eq!(sessions(&upstream).await["live"], 0);

    // The server answers 404 to the old session; the caller sees only its answer.
    let echo = app
        .call("u", &server, "echo", json!({"text": "again"}))
        .await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    assert_eq!(crate::upstreams::text_of(&echo.body), "again");
    assert_eq!(sessions(&upstream).await["live"], 1, "a new session");
    let connections = app.connections().await;
    assert_eq!(connections[0]["state"], "connected", "{connections:?}");
}

#[tokio::test]
async fn a_response_stream_closed_mid_call_is_resumed_with_last_event_id() {
    // The server closes the call's SSE stream after its priming event (SEP-1699, `retry`
    // 200 ms) and answers 600 ms later, on the stream the client resumes with GET.
    let upstream = HttpUpstream::resumable().await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "resumable", "baseUrl": format!("{}/mcp", upstream.base), "timeoutSecs": 20}),
        )
        .await;
    let reply = app.call("u", &server, "interrupted", json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        crate::upstreams::text_of(&reply.body),
        "answered after the stream closed"
    );
    let stats: Value = reqwest::get(format!("{}/stats", upstream.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(stats["resumes"].as_u64() >= Some(1), "{stats}");
}

#[tokio::test]
async fn a_server_that_speaks_only_2026_07_28_is_opened_with_discover() {
    // It refuses `initialize` (-32022, unsupported protocol version).
    let upstream = HttpUpstream::fixture_with(&["--modern-only"]).await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "modern", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    let connected = app.connect("u", &server).await;
    assert_eq!(connected.status, StatusCode::OK, "{}", connected.text);
    assert_eq!(
        connected.body["protocolVersion"], "2026-07-28",
        "{}",
        connected.text
    );
    let echo = app
        .call("u", &server, "echo", json!({"text": "no handshake"}))
        .await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    assert_eq!(crate::upstreams::text_of(&echo.body), "no handshake");
}

/// The newest revision a server offers is the one spoken: a server of every revision is
/// asked `server/discover` and spoken to in 2026-07-28 without a session; one written
/// before 2026-07-28 does not know the method and is opened with `initialize`.
#[tokio::test]
async fn the_newest_revision_a_server_offers_is_spoken() {
    let app = spawn_pool_app().await;
    for (flags, version, live_sessions) in [
        (&[][..], "2026-07-28", 0),
        (&["--legacy-only"][..], "2025-11-25", 1),
    ] {
        let upstream = HttpUpstream::fixture_with(flags).await;
        let server = app
            .create_server_ok(
                "u",
                json!({"name": format!("fx{}", flags.len()), "baseUrl": format!("{}/mcp", upstream.base)}),
            )
            .await;
        let connected = app.connect("u", &server).await;
        assert_eq!(connected.status, StatusCode::OK, "{}", connected.text);
        assert_eq!(
            connected.body["protocolVersion"], version,
            "{flags:?}: {}",
            connected.text
        );
        let echo = app
            .call("u", &server, "echo", json!({"text": version}))
            .await;
        assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
        assert_eq!(crate::upstreams::text_of(&echo.body), version);
        assert_eq!(
            sessions(&upstream).await["live"],
            live_sessions,
            "{flags:?}"
        );
    }
}
