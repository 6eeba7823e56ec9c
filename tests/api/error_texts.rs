//! What a person reads when a connection fails names the cause in words, never a type
//! path of the service's libraries (issue 40, "Diagnostics").

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{TestApp, spawn_app_with};

#[tokio::test]
async fn a_refused_connection_says_refused_and_no_type_path() {
    let app = spawn_app_with(|s| s.security.allow_loopback_urls = true).await;
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let id = app
        .create_server_ok(
            "u",
            json!({"name": "gone", "type": "streamableHttp",
                   "baseUrl": format!("http://127.0.0.1:{port}/mcp")}),
        )
        .await;
    let failed = app.connect("u", &id).await;
    assert_eq!(failed.status, StatusCode::BAD_GATEWAY, "{}", failed.text);
    assert_eq!(failed.code(), "MCP_CONNECTION_ERROR", "{}", failed.text);
    let message = failed.body["error"]["message"].as_str().unwrap();
    assert!(
        message.to_lowercase().contains("refused"),
        "the cause is named: {message}"
    );
    assert!(!message.contains("::"), "no type path: {message}");
    let connections = app.connections().await;
    let last_error = connections[0]["lastError"].as_str().unwrap_or_default();
    assert!(!last_error.contains("::"), "no type path: {last_error}");
}

/// Connects `server` of `user` and returns what the API said and what the connection's
/// last error reads, each checked for a type path; the failure is 502 or 409.
async fn failed_connect(app: &TestApp, user: &str, server: &str) -> (String, String) {
    let failed = app.connect(user, server).await;
    assert!(
        [
            StatusCode::BAD_GATEWAY,
            StatusCode::CONFLICT,
            StatusCode::GATEWAY_TIMEOUT
        ]
        .contains(&failed.status),
        "{}",
        failed.text
    );
    let message = failed.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!message.contains("::"), "no type path: {message}");
    let last_error = app
        .connections()
        .await
        .iter()
        .find(|c| c["serverId"] == server)
        .and_then(|c| c["lastError"].as_str().map(str::to_owned))
        .unwrap_or_default();
    assert!(!last_error.contains("::"), "no type path: {last_error}");
    (message, last_error)
}

/// Why a server could not be used: its creation's refusal, or its connect's failure.
async fn refusal(app: &TestApp, created: &crate::helpers::Reply) -> String {
    if created.status == StatusCode::CREATED {
        let id = created.body["id"].as_str().unwrap().to_owned();
        failed_connect(app, "u", &id).await.0
    } else {
        created.body["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

fn says(text: &str, words: &[&str]) -> bool {
    let text = text.to_lowercase();
    words.iter().any(|w| text.contains(w))
}

#[tokio::test]
async fn a_server_that_never_answers_says_timed_out() {
    let app = spawn_app_with(|s| {
        s.security.allow_loopback_urls = true;
        s.pool.connect_timeout_secs = 1;
    })
    .await;
    // Accepts and then says nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let id = app
        .create_server_ok(
            "u",
            json!({"name": "silent", "type": "streamableHttp", "timeoutSecs": 1,
                   "baseUrl": format!("http://127.0.0.1:{port}/mcp")}),
        )
        .await;
    let (message, _) = failed_connect(&app, "u", &id).await;
    assert!(says(&message, &["timed out", "timeout"]), "{message}");
}

#[tokio::test]
async fn a_tls_failure_says_tls_or_certificate() {
    let app = spawn_app_with(|s| s.security.allow_loopback_urls = true).await;
    // A plain HTTP listener, dialled over https.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    let id = app
        .create_server_ok(
            "u",
            json!({"name": "notls", "type": "streamableHttp",
                   "baseUrl": format!("https://127.0.0.1:{port}/mcp")}),
        )
        .await;
    let (message, last_error) = failed_connect(&app, "u", &id).await;
    assert!(
        says(&message, &["tls", "certificate", "handshake"]),
        "{message}"
    );
    assert!(
        says(&last_error, &["tls", "certificate", "handshake"]),
        "{last_error}"
    );
}

#[tokio::test]
async fn a_name_that_does_not_resolve_says_so() {
    let app = crate::ssrf::strict_app("gone.example.com", vec![None]).await;
    let created = app
        .create_server(
            "u",
            json!({"name": "gone", "type": "streamableHttp",
                   "baseUrl": "https://gone.example.com/mcp"}),
        )
        .await;
    let message = refusal(&app, &created).await;
    assert!(!message.contains("::"), "{message}");
    assert!(
        says(&message, &["resolve", "dns", "no such name"]),
        "{message}"
    );
    assert!(
        message.contains("gone.example.com"),
        "the target is named: {message}"
    );
}

#[tokio::test]
async fn a_server_that_answers_401_says_unauthorized() {
    let app = spawn_app_with(|s| s.security.allow_loopback_urls = true).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 8192];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    let id = app
        .create_server_ok(
            "u",
            json!({"name": "locked", "type": "streamableHttp",
                   "baseUrl": format!("http://127.0.0.1:{port}/mcp")}),
        )
        .await;
    let (message, _) = failed_connect(&app, "u", &id).await;
    assert!(
        says(&message, &["401", "unauthorized", "authoriz"]),
        "{message}"
    );
}

#[tokio::test]
async fn an_address_the_policy_forbids_says_policy() {
    let app = crate::ssrf::strict_app(
        "inside.example.com",
        vec![Some("10.1.2.3".parse().unwrap())],
    )
    .await;
    let created = app
        .create_server(
            "u",
            json!({"name": "inside", "type": "streamableHttp",
                   "baseUrl": "https://inside.example.com/mcp"}),
        )
        .await;
    let message = refusal(&app, &created).await;
    assert!(!message.contains("::"), "{message}");
    assert!(
        says(&message, &["policy", "not allowed", "private", "forbidden"]),
        "{message}"
    );
}

/// A 2026-07-28 server that answers a call with a body that is not one JSON-RPC message
/// (the 0.2.0 everything-server's `test_streaming_elicitation` sends two lines of JSON as
/// `application/json`): the call fails saying so, in words, and the next call works.
#[tokio::test]
async fn an_answer_that_is_not_json_rpc_is_said_in_words() {
    let upstream = crate::upstreams::HttpUpstream::conformance_server_next().await;
    let app = spawn_app_with(|s| s.security.allow_loopback_urls = true).await;
    let id = app
        .create_server_ok(
            "u",
            json!({"name": "next", "type": "streamableHttp",
                   "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    let broken = app
        .call("u", &id, "test_streaming_elicitation", json!({}))
        .await;
    let message = broken.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not a JSON-RPC message"),
        "{}",
        broken.text
    );
    assert!(!message.contains("::"), "no type path: {message}");
    let fine = app.call("u", &id, "test_simple_text", json!({})).await;
    assert_eq!(fine.status, StatusCode::OK, "{}", fine.text);
}
