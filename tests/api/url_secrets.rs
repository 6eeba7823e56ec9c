//! Credentials inside a server's URL (`https://user:pass@host/mcp?api_key=…`) are secrets
//! like headers: masked in every answer, sealed at rest, never logged or quoted in an
//! error, and still sent in clear to the server itself.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app};
use crate::logging::{ADMIN_KEY, Binary, start_binary, wait_for_line};
use crate::upstreams::{HttpUpstream, free_port};

const USER: &str = "url-user-4d1";
const PASS: &str = "url-pass-7e2";
const KEY: &str = "url-key-9c3";
const REGION: &str = "region-b58";
const MASK: &str = "********";

/// The fixture over streamable HTTP, answering 401 without our credentials.
async fn guarded_fixture() -> HttpUpstream {
    HttpUpstream::fixture_with(&[
        "--require-basic",
        &format!("{USER}:{PASS}"),
        "--require-query",
        &format!("api_key={KEY}"),
    ])
    .await
}

/// `127.0.0.1:PORT` of an upstream.
fn authority(upstream: &HttpUpstream) -> String {
    upstream.base.trim_start_matches("http://").to_owned()
}

fn clear_url(authority: &str) -> String {
    format!("http://{USER}:{PASS}@{authority}/mcp?api_key={KEY}&region={REGION}")
}

fn masked_url(authority: &str) -> String {
    format!("http://{MASK}:{MASK}@{authority}/mcp?api_key={MASK}&region={MASK}")
}

fn assert_no_secret(text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

fn open_sealed(app: &TestApp, sealed: &str) -> String {
    let cipher =
        mcp_pool::security::Cipher::load(&app.settings.security, &app.settings.storage.data_dir)
            .expect("test can load the key");
    cipher.open(sealed).expect("sealed value opens")
}

/// The one server's `base_url` column and its sealed URL, opened.
async fn stored_url(app: &TestApp) -> (String, String) {
    let base_url = app.raw_column("mcp_servers", "base_url").await;
    let sealed = app.raw_column("mcp_servers", "base_url_sealed").await;
    assert_eq!((base_url.len(), sealed.len()), (1, 1));
    (base_url[0].clone(), open_sealed(app, &sealed[0]))
}

async fn connect(app: &TestApp, server: &str) -> crate::helpers::Reply {
    app.user(
        "u",
        Method::POST,
        &format!("/api/mcp-servers/{server}/connect"),
        None,
    )
    .await
}

async fn put_url(app: &TestApp, server: &str, url: &str) -> crate::helpers::Reply {
    app.user(
        "u",
        Method::PUT,
        &format!("/api/mcp-servers/{server}"),
        Some(json!({ "baseUrl": url })),
    )
    .await
}

#[tokio::test]
async fn url_credentials_are_masked_sealed_and_still_reach_the_server() {
    let upstream = guarded_fixture().await;
    let host = authority(&upstream);
    let app = spawn_pool_app().await;
    let all = [USER, PASS, KEY, REGION];

    let created = app
        .create_server("u", json!({"name": "keyed", "baseUrl": clear_url(&host)}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let id = created.body["id"].as_str().unwrap().to_owned();
    let listed = app.user("u", Method::GET, "/api/mcp-servers", None).await;
    let read = app
        .user("u", Method::GET, &format!("/api/mcp-servers/{id}"), None)
        .await;
    assert_eq!(created.body["baseUrl"], masked_url(&host));
    assert_eq!(listed.body["servers"][0]["baseUrl"], masked_url(&host));
    assert_eq!(read.body["baseUrl"], masked_url(&host));
    for reply in [&created, &listed, &read] {
        assert_no_secret(&reply.text, &all);
    }

    // At rest: the plain column holds the masked URL, the clear one is sealed.
    assert_eq!(
        stored_url(&app).await,
        (masked_url(&host), clear_url(&host))
    );

    // The fixture refuses a request without the credentials: they reached it.
    let connected = connect(&app, &id).await;
    assert_eq!(connected.status, StatusCode::OK, "{}", connected.text);
    let echoed = app.call("u", &id, "echo", json!({"text": "hi"})).await;
    assert_eq!(echoed.status, StatusCode::OK, "{}", echoed.text);

    // GET -> PUT of the whole object keeps the stored credentials (the PUT stops the
    // connection, so the next connect dials the merged URL).
    let round_trip = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{id}"),
            Some(read.body.clone()),
        )
        .await;
    assert_eq!(round_trip.status, StatusCode::OK, "{}", round_trip.text);
    assert_eq!(round_trip.body["baseUrl"], masked_url(&host));
    assert_eq!(
        stored_url(&app).await,
        (masked_url(&host), clear_url(&host))
    );
    let again = connect(&app, &id).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);

    // Only what is sent masked is kept: the dropped parameter is gone.
    let fewer = put_url(
        &app,
        &id,
        &format!("http://{MASK}:{MASK}@{host}/mcp?api_key={MASK}"),
    )
    .await;
    assert_eq!(fewer.status, StatusCode::OK, "{}", fewer.text);
    assert_eq!(
        stored_url(&app).await.1,
        format!("http://{USER}:{PASS}@{host}/mcp?api_key={KEY}")
    );

    let refusals = [
        // Masked credentials never follow the URL to another host.
        format!(
            "http://{MASK}:{MASK}@localhost:{}/mcp?api_key={MASK}",
            upstream.port()
        ),
        // A mask stands for a stored value; there is none for `token`.
        format!("http://{MASK}:{MASK}@{host}/mcp?api_key={MASK}&token={MASK}"),
    ];
    for url in refusals {
        let refused = put_url(&app, &id, &url).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_ERROR"),
            "{url}: {}",
            refused.text
        );
        assert_no_secret(&refused.text, &all);
    }

    // A clear URL replaces the credentials; a wrong key is refused by the server, and the
    // error does not quote it.
    let rotated = "rotated-key-0f6";
    let replaced = put_url(
        &app,
        &id,
        &format!("http://{USER}:{PASS}@{host}/mcp?api_key={rotated}"),
    )
    .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.text);
    assert_eq!(
        replaced.body["baseUrl"],
        format!("http://{MASK}:{MASK}@{host}/mcp?api_key={MASK}")
    );
    let refused = connect(&app, &id).await;
    assert!(!refused.status.is_success(), "{}", refused.text);
    let connections = app.admin(Method::GET, "/admin/connections", None).await;
    for text in [&refused.text, &connections.text] {
        assert_no_secret(text, &[USER, PASS, rotated]);
    }
}

#[tokio::test]
async fn connection_errors_never_quote_url_credentials() {
    let app = spawn_pool_app().await;
    let port = free_port();
    let secrets = [USER, PASS, KEY];
    for (name, path) in [("streamable", "mcp"), ("legacy", "sse")] {
        let id = app
            .create_server_ok(
                "u",
                json!({"name": name, "baseUrl": format!("http://{USER}:{PASS}@127.0.0.1:{port}/{path}?api_key={KEY}")}),
            )
            .await;
        let failed = connect(&app, &id).await;
        assert_eq!(failed.status, StatusCode::BAD_GATEWAY, "{}", failed.text);
        assert_eq!(failed.code(), "MCP_CONNECTION_ERROR");
        assert_no_secret(&failed.text, &secrets);
        // The same failure, remembered by the connection (backoff), and shown to the admin.
        let again = app.call("u", &id, "echo", json!({"text": "x"})).await;
        assert_no_secret(&again.text, &secrets);
    }
    let connections = app.admin(Method::GET, "/admin/connections", None).await;
    assert_eq!(connections.status, StatusCode::OK);
    assert_no_secret(&connections.text, &secrets);
}

#[tokio::test]
async fn url_credentials_stored_in_clear_are_sealed_at_start() {
    let upstream = guarded_fixture().await;
    let host = authority(&upstream);
    let app = spawn_pool_app().await;
    let id = app
        .create_server_ok("u", json!({"name": "old", "baseUrl": clear_url(&host)}))
        .await;
    // What a row written before URL credentials were sealed looks like.
    app.raw_execute(&format!(
        "UPDATE mcp_servers SET base_url = '{}', base_url_sealed = NULL",
        clear_url(&host)
    ))
    .await;

    let app = app.restart().await;

    assert_eq!(
        stored_url(&app).await,
        (masked_url(&host), clear_url(&host))
    );
    let read = app
        .user("u", Method::GET, &format!("/api/mcp-servers/{id}"), None)
        .await;
    assert_eq!(read.body["baseUrl"], masked_url(&host), "{}", read.text);
    let connected = connect(&app, &id).await;
    assert_eq!(connected.status, StatusCode::OK, "{}", connected.text);
}

#[tokio::test]
async fn url_credentials_never_reach_the_logs() {
    let upstream = guarded_fixture().await;
    let host = authority(&upstream);
    let Binary {
        mut child,
        lines,
        base,
        // Bound, not dropped: the service's data directory must outlive it.
        data_dir: _data_dir,
        ..
    } = start_binary(&[("MCP_POOL__SECURITY__ALLOW_LOOPBACK_URLS", "true")]).await;
    let client = reqwest::Client::new();
    let send = |method: Method, path: String, body: Value| {
        client
            .request(method, format!("{base}{path}"))
            .bearer_auth(ADMIN_KEY)
            .header("X-User-Id", "u")
            .json(&body)
            .send()
    };
    let dead = format!(
        "http://{USER}:{PASS}@127.0.0.1:{}/mcp?api_key={KEY}",
        free_port()
    );
    let mut statuses = Vec::new();
    for (name, url) in [("keyed", clear_url(&host)), ("dead", dead)] {
        let created: Value = send(
            Method::POST,
            "/api/mcp-servers".into(),
            json!({"name": name, "baseUrl": url}),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        let id = created["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no server id in {created}"))
            .to_owned();
        let connected = send(
            Method::POST,
            format!("/api/mcp-servers/{id}/connect"),
            json!({}),
        )
        .await
        .unwrap();
        statuses.push(connected.status());
    }
    assert_eq!(statuses, [StatusCode::OK, StatusCode::BAD_GATEWAY]);

    wait_for_line(&lines, "for the connect", |l| {
        l.contains("MCP connection established")
    })
    .await;
    wait_for_line(&lines, "for the failed connect", |l| {
        l.contains("MCP connection failed")
    })
    .await;
    child.kill().await.unwrap();
    for line in lines.lock().unwrap().iter() {
        assert_no_secret(line, &[USER, PASS, KEY, REGION]);
    }
}
