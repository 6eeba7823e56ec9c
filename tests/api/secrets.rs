//! Multi-tenant security: no user-chosen commands, no internal URLs, no secrets in clear.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, spawn_app_with};

fn everything_preset() -> Value {
    json!({
        "name": "everything",
        "description": "The MCP reference server",
        "command": "node",
        "args": ["server-everything/dist/index.js", "{mode}"],
        "argSlots": [{"name": "mode", "default": "stdio", "pattern": "stdio|sse"}],
        "envSlots": [{"name": "API_TOKEN", "required": true}]
    })
}

fn open_sealed(app: &TestApp, sealed: &str) -> String {
    let cipher =
        mcp_pool::security::Cipher::load(&app.settings.security, &app.settings.storage.data_dir)
            .expect("test can load the key");
    cipher.open(sealed).expect("sealed value opens")
}

#[tokio::test]
async fn users_cannot_choose_a_command() {
    let app = spawn_app().await;
    let reply = app
        .create_server(
            "u",
            json!({"name": "sh", "type": "stdio", "command": "/bin/sh", "args": ["-c", "id"]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text);
    assert_eq!(reply.code(), "FORBIDDEN_COMMAND");

    app.create_preset_ok(everything_preset()).await;
    let with_preset = app
        .create_server("u", json!({"name": "e", "preset": "everything", "command": "/bin/sh", "env": {"API_TOKEN": "t"}}))
        .await;
    assert_eq!(with_preset.status, StatusCode::FORBIDDEN);
    assert_eq!(with_preset.code(), "FORBIDDEN_COMMAND");
    let with_args = app
        .create_server("u", json!({"name": "e", "preset": "everything", "args": ["--inspect"], "env": {"API_TOKEN": "t"}}))
        .await;
    assert_eq!(with_args.code(), "FORBIDDEN_COMMAND");
}

#[tokio::test]
async fn stdio_servers_come_from_presets_with_checked_slots() {
    let app = spawn_app().await;
    app.create_preset_ok(everything_preset()).await;
    let created = app
        .create_server(
            "u",
            json!({"name": "everything", "preset": "everything", "presetArgs": {"mode": "sse"}, "env": {"API_TOKEN": "tok-secret"}}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["type"], "stdio");
    assert_eq!(created.body["command"], "node");
    assert_eq!(
        created.body["args"],
        json!(["server-everything/dist/index.js", "sse"])
    );
    assert_eq!(created.body["env"], json!({"API_TOKEN": "********"}));
    assert!(created.body.get("baseUrl").is_none());

    // A GET -> PUT round trip of the whole object is accepted unchanged.
    let id = created.body["id"].as_str().unwrap();
    let round_trip = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{id}"),
            Some(created.body.clone()),
        )
        .await;
    assert_eq!(round_trip.status, StatusCode::OK, "{}", round_trip.text);
    assert_eq!(round_trip.body["args"], created.body["args"]);

    let refusals = [
        (
            json!({"name": "a", "preset": "missing"}),
            StatusCode::NOT_FOUND,
            "PRESET_NOT_FOUND",
        ),
        (
            json!({"name": "a", "preset": "everything"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"name": "a", "preset": "everything", "env": {"API_TOKEN": "t", "LD_PRELOAD": "/x.so"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"name": "a", "preset": "everything", "presetArgs": {"mode": "--eval=1"}, "env": {"API_TOKEN": "t"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"name": "a", "preset": "everything", "presetArgs": {"other": "x"}, "env": {"API_TOKEN": "t"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"name": "a", "preset": "everything", "env": {"API_TOKEN": "t"}, "baseUrl": "https://93.184.216.34/mcp"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
    ];
    for (body, status, code) in refusals {
        let reply = app.create_server("u", body.clone()).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{body}: {}",
            reply.text
        );
    }
}

#[tokio::test]
async fn internal_urls_are_refused_unless_the_admin_allows_them() {
    let app = spawn_app().await;
    for url in [
        "http://127.0.0.1:3001/mcp",
        "http://localhost:3001/sse",
        "http://[::1]/mcp",
        "http://10.0.0.8/mcp",
        "http://192.168.1.10/mcp",
        "http://169.254.169.254/latest/meta-data/",
    ] {
        let reply = app
            .create_server("u", json!({"name": "x", "baseUrl": url}))
            .await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{url}: {}", reply.text);
        assert_eq!(reply.code(), "URL_NOT_ALLOWED", "{url}");
    }
    // Updating an existing server to an internal URL is refused the same way.
    let id = app
        .create_server_ok(
            "u",
            json!({"name": "ok", "baseUrl": "https://93.184.216.34/mcp"}),
        )
        .await;
    let update = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{id}"),
            Some(json!({"baseUrl": "http://127.0.0.1/mcp"})),
        )
        .await;
    assert_eq!(update.code(), "URL_NOT_ALLOWED");

    let permissive = spawn_app_with(|s| s.security.allow_loopback_urls = true).await;
    permissive
        .create_server_ok(
            "u",
            json!({"name": "local", "baseUrl": "http://127.0.0.1:3001/mcp"}),
        )
        .await;
    let metadata = permissive
        .create_server(
            "u",
            json!({"name": "m", "baseUrl": "http://169.254.169.254/"}),
        )
        .await;
    assert_eq!(
        metadata.code(),
        "URL_NOT_ALLOWED",
        "loopback permission does not open metadata"
    );
}

#[tokio::test]
async fn secrets_are_masked_in_responses_and_encrypted_at_rest() {
    let app = spawn_app().await;
    app.create_preset_ok(everything_preset()).await;
    let remote = app
        .create_server(
            "u",
            json!({"name": "r", "baseUrl": "https://93.184.216.34/mcp", "headers": {"Authorization": "Bearer header-secret-1"}}),
        )
        .await;
    let stdio = app
        .create_server(
            "u",
            json!({"name": "s", "preset": "everything", "env": {"API_TOKEN": "env-secret-2"}}),
        )
        .await;
    let remote_id = remote.body["id"].as_str().unwrap().to_owned();
    let replies = [
        remote.text.clone(),
        stdio.text.clone(),
        app.user("u", Method::GET, "/api/mcp-servers", None)
            .await
            .text,
        app.user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{remote_id}"),
            None,
        )
        .await
        .text,
        app.user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{remote_id}"),
            Some(json!({"headers": {"Authorization": "********", "X-Extra": "extra-secret-3"}})),
        )
        .await
        .text,
    ];
    for text in &replies {
        for secret in ["header-secret-1", "env-secret-2", "extra-secret-3"] {
            assert!(!text.contains(secret), "a response leaked {secret}: {text}");
        }
    }

    let stored: Vec<String> = [
        app.raw_column("mcp_servers", "headers").await,
        app.raw_column("mcp_servers", "env").await,
    ]
    .concat()
    .into_iter()
    .filter(|v| !v.is_empty())
    .collect();
    assert_eq!(stored.len(), 2);
    for value in &stored {
        assert!(!value.contains("secret"), "stored in clear: {value}");
    }
    // The masked header kept its stored value; the new one was added.
    let headers = stored
        .iter()
        .map(|v| open_sealed(&app, v))
        .find(|v| v.contains("Authorization"))
        .unwrap();
    let headers: Value = serde_json::from_str(&headers).unwrap();
    assert_eq!(
        headers,
        json!({"Authorization": "Bearer header-secret-1", "X-Extra": "extra-secret-3"})
    );
}
