//! Per-user OAuth against an authorization server this project did not write: the
//! TypeScript MCP SDK's `mcpAuthRouter` with its demo provider, in front of an MCP server
//! guarded by the SDK's `requireBearerAuth` (`tests/upstreams/sdk_oauth_server.mjs`).
//! Proves the service interoperates with it as it is: discovery from the 401 (RFC 9728
//! metadata at the path-aware URL, an issuer with a trailing slash), DCR, PKCE S256 with
//! RFC 8707 `resource` (the server insists), a token response without a refresh token, no
//! `iss` on the redirect, and forgetting where the AS has no revocation endpoint.

use std::collections::HashMap;

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Reply, TestApp, spawn_pool_app};
use crate::upstreams::{HttpUpstream, text_of};

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn query(url: &str) -> HashMap<String, String> {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect()
}

/// The user's browser: follows the AS's redirects by hand up to the service's callback,
/// then opens it. The SDK's demo AS consents at once: `GET /authorize` is one 302.
async fn browse(app: &TestApp, authorization_url: &str) {
    let callback = format!("{}/oauth/callback", app.address);
    let mut url = url::Url::parse(authorization_url).unwrap();
    for _ in 0..10 {
        let response = no_redirects().get(url.clone()).send().await.unwrap();
        assert!(
            response.status().is_redirection(),
            "the SDK's AS answered {} at {url}",
            response.status()
        );
        let location = response.headers()["location"].to_str().unwrap();
        url = url.join(location).unwrap();
        if url.as_str().starts_with(&callback) {
            let pairs = query(url.as_str());
            assert!(
                pairs.contains_key("code"),
                "the AS refused the authorization: {url}"
            );
            let done = no_redirects().get(url.clone()).send().await.unwrap();
            let status = done.status();
            let body = done.text().await.unwrap_or_default();
            assert!(
                status.is_success() || status.is_redirection(),
                "the callback answered {status}: {body}"
            );
            return;
        }
    }
    panic!("the SDK's AS never redirected to {callback}");
}

async fn oauth(app: &TestApp, user: &str, method: Method, server: &str, tail: &str) -> Reply {
    app.user(
        user,
        method,
        &format!("/api/mcp-servers/{server}/oauth{tail}"),
        None,
    )
    .await
}

/// Starts an authorization as `user` and completes it in the "browser"; the URL used.
async fn authorize(app: &TestApp, user: &str, server: &str) -> String {
    let started = oauth(app, user, Method::POST, server, "/authorize").await;
    assert_eq!(started.status, StatusCode::OK, "{}", started.text);
    let url = started.body["authorizationUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("no authorizationUrl: {}", started.text))
        .to_owned();
    let expires = started.body["expiresAt"].as_str().unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(expires).is_ok(),
        "expiresAt is RFC 3339: {}",
        started.text
    );
    browse(app, &url).await;
    url
}

async fn create(app: &TestApp, user: &str, upstream: &HttpUpstream) -> String {
    app.create_server_ok(
        user,
        json!({"name": "sdkas", "type": "streamableHttp", "baseUrl": format!("{}/mcp", upstream.base)}),
    )
    .await
}

#[tokio::test]
async fn an_authorization_server_from_the_sdk_authorizes_a_users_server() {
    let app = spawn_pool_app().await;
    let upstream = HttpUpstream::sdk_oauth().await;
    let server = create(&app, "alice", &upstream).await;

    let refused = app.call("alice", &server, "whoami", json!({})).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::CONFLICT, "MCP_AUTH_REQUIRED"),
        "the SDK server's 401 asks alice to authorize: {}",
        refused.text
    );
    let url = refused.body["error"]["authorizationUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("no authorizationUrl: {}", refused.text));
    assert!(
        url.starts_with(&format!("{}/authorize?", upstream.base)),
        "the URL leads to the SDK's AS: {url}"
    );
    let pairs = query(url);
    assert_eq!(pairs["code_challenge_method"], "S256", "{url}");
    assert_eq!(
        pairs["resource"],
        format!("{}/mcp", upstream.base),
        "the SDK server only grants tokens for its own resource: {url}"
    );

    for (method, tail) in [(Method::GET, ""), (Method::POST, "/authorize")] {
        let foreign = oauth(&app, "bob", method, &server, tail).await;
        assert_eq!(
            (foreign.status, foreign.code()),
            (StatusCode::NOT_FOUND, "MCP_SERVER_NOT_FOUND"),
            "bob cannot see alice's /oauth{tail}: {}",
            foreign.text
        );
    }

    let used = authorize(&app, "alice", &server).await;
    let report = oauth(&app, "alice", Method::GET, &server, "").await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.text);
    assert_eq!(report.body["status"], "authorized", "{}", report.text);
    assert!(
        report.body["issuer"]
            .as_str()
            .is_some_and(|issuer| issuer.starts_with(&upstream.base)),
        "the issuer is the SDK's AS (it says `{}/`): {}",
        upstream.base,
        report.text
    );
    assert!(report.body["scopes"].is_array(), "{}", report.text);
    assert!(report.body["expiresAt"].is_string(), "{}", report.text);

    let called = app.call("alice", &server, "whoami", json!({})).await;
    assert_eq!(called.status, StatusCode::OK, "{}", called.text);
    let client_id = query(&used)["client_id"].clone();
    assert!(
        text_of(&called.body).contains(&format!("client_id={client_id}")),
        "the SDK server saw the service's registered client `{client_id}`: {}",
        called.text
    );
    let echoed = app
        .call("alice", &server, "echo", json!({"text": "hi"}))
        .await;
    assert_eq!(
        (echoed.status, text_of(&echoed.body)),
        (StatusCode::OK, "hi"),
        "{}",
        echoed.text
    );
}

#[tokio::test]
async fn forgetting_an_sdk_authorization_without_a_revocation_endpoint_asks_again() {
    let app = spawn_pool_app().await;
    let upstream = HttpUpstream::sdk_oauth().await;
    let server = create(&app, "alice", &upstream).await;
    authorize(&app, "alice", &server).await;
    assert_eq!(
        app.call("alice", &server, "whoami", json!({})).await.status,
        StatusCode::OK
    );

    // The SDK's AS offers no revocation endpoint: forgetting is local, and still works.
    let forgot = oauth(&app, "alice", Method::DELETE, &server, "").await;
    assert_eq!(forgot.status, StatusCode::NO_CONTENT, "{}", forgot.text);
    let report = oauth(&app, "alice", Method::GET, &server, "").await;
    assert_eq!(report.body["status"], "required", "{}", report.text);
    // The old token is still valid at the AS; the service must not use it any more.
    let refused = app.call("alice", &server, "whoami", json!({})).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::CONFLICT, "MCP_AUTH_REQUIRED"),
        "a forgotten authorization is asked for again: {}",
        refused.text
    );
    assert!(
        refused.body["error"]["authorizationUrl"].is_string(),
        "{}",
        refused.text
    );

    // ... and can be given again.
    authorize(&app, "alice", &server).await;
    let called = app.call("alice", &server, "whoami", json!({})).await;
    assert_eq!(called.status, StatusCode::OK, "{}", called.text);
}
