//! The Xiaozhi bridge against a loopback WebSocket server playing the voice platform.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::helpers::{TestApp, spawn_pool_app_with};
use crate::upstreams::{eventually, fixture_preset};

pub(crate) type Socket = WebSocketStream<TcpStream>;

/// Waits for the bridge to dial in.
pub(crate) async fn accept(listener: &TcpListener) -> Socket {
    let (stream, _) = tokio::time::timeout(Duration::from_secs(15), listener.accept())
        .await
        .expect("the bridge connects")
        .unwrap();
    tokio_tungstenite::accept_async(stream).await.unwrap()
}

/// Sends a JSON-RPC request and reads frames until its answer.
pub(crate) async fn request(socket: &mut Socket, id: u64, method: &str, params: Value) -> Value {
    let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    socket
        .send(Message::text(message.to_string()))
        .await
        .unwrap();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(15), socket.next())
            .await
            .expect("an answer")
            .expect("the socket is open")
            .unwrap();
        if let Message::Text(text) = frame {
            let value: Value = serde_json::from_str(&text).unwrap();
            if value["id"] == id {
                return value;
            }
        }
    }
}

pub(crate) async fn initialize(socket: &mut Socket) -> Value {
    let answer = request(
        socket,
        1,
        "initialize",
        json!({"protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "xiaozhi-test", "version": "1.0"}}),
    )
    .await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    socket
        .send(Message::text(initialized.to_string()))
        .await
        .unwrap();
    answer
}

async fn bridge_status(app: &TestApp) -> Value {
    let reply = app.admin(Method::GET, "/admin/xiaozhi", None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body["bridges"][0].clone()
}

#[tokio::test]
async fn the_bridge_serves_the_assistants_tools_and_reconnects_when_dropped() {
    let app = spawn_pool_app_with(|s| {
        s.xiaozhi.reconnect_min_secs = 1;
        s.xiaozhi.reconnect_max_secs = 2;
    })
    .await;
    app.create_preset_ok(fixture_preset()).await;
    let fx = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "fixture", "autoApproveTools": ["echo", "big"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&fx]).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let endpoint = format!("ws://127.0.0.1:{port}/mcp/?token=secret-xiaozhi-token");
    let put = app
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a1/xiaozhi",
            Some(json!({"endpoint": endpoint})),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    assert!(
        !put.text.contains("secret-xiaozhi-token"),
        "the token is never shown: {}",
        put.text
    );
    assert_eq!(put.body["enabled"], true);

    let mut socket = accept(&listener).await;
    let init = initialize(&mut socket).await;
    assert_eq!(
        init["result"]["serverInfo"]["name"], "mcp-pool gateway",
        "{init}"
    );
    let tools = request(&mut socket, 2, "tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"fx.echo") && names.contains(&"fx.big"),
        "{names:?}"
    );

    let echo = request(
        &mut socket,
        3,
        "tools/call",
        json!({"name": "fx.echo", "arguments": {"text": "hi xiaozhi"}}),
    )
    .await;
    assert_eq!(echo["result"]["content"][0]["text"], "hi xiaozhi", "{echo}");
    let big = request(
        &mut socket,
        4,
        "tools/call",
        json!({"name": "fx.big", "arguments": {"bytes": 5000}}),
    )
    .await;
    let content = &big["result"]["content"];
    assert!(
        content.to_string().len() <= 1024,
        "cut to 1024 bytes: {}",
        content.to_string().len()
    );
    assert!(
        content[0]["text"].as_str().unwrap().contains("[truncated"),
        "{content}"
    );
    let pong = request(&mut socket, 5, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));

    let status = bridge_status(&app).await;
    assert_eq!(status["state"], "connected", "{status}");
    assert_eq!(status["connections"], 1);
    assert!(!status.to_string().contains("secret-xiaozhi-token"));

    // The platform drops the socket: the bridge dials again after its backoff.
    drop(socket);
    eventually("the bridge notices the drop", || async {
        bridge_status(&app).await["state"] != "connected"
    })
    .await;
    let status = bridge_status(&app).await;
    assert!(status["lastError"].is_string(), "{status}");
    let mut socket = accept(&listener).await;
    let init = initialize(&mut socket).await;
    assert!(init["result"].is_object(), "{init}");
    eventually("the second connection is counted", || async {
        bridge_status(&app).await["connections"] == 2
    })
    .await;

    // Deleting the bridge closes it and stops redialling.
    let deleted = app
        .user("u", Method::DELETE, "/api/assistants/a1/xiaozhi", None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the bridge closed its socket");
    let gone = app
        .user("u", Method::GET, "/api/assistants/a1/xiaozhi", None)
        .await;
    assert_eq!(gone.code(), "XIAOZHI_BRIDGE_NOT_FOUND");
}

#[tokio::test]
async fn bridge_endpoints_are_checked_like_server_urls() {
    let app = spawn_pool_app_with(|_| {}).await;
    for (endpoint, status) in [
        ("https://example.com/mcp", StatusCode::UNPROCESSABLE_ENTITY),
        ("not a url", StatusCode::UNPROCESSABLE_ENTITY),
        ("ws://10.0.0.8/mcp", StatusCode::FORBIDDEN),
        ("ws://169.254.169.254/", StatusCode::FORBIDDEN),
    ] {
        let reply = app
            .user(
                "u",
                Method::PUT,
                "/api/assistants/a1/xiaozhi",
                Some(json!({"endpoint": endpoint})),
            )
            .await;
        assert_eq!(reply.status, status, "{endpoint}: {}", reply.text);
    }
    let disabled = app
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a1/xiaozhi",
            Some(json!({"endpoint": "ws://127.0.0.1:9/mcp", "enabled": false})),
        )
        .await;
    assert_eq!(disabled.status, StatusCode::OK, "{}", disabled.text);
    assert_eq!(disabled.body["status"]["state"], "disabled");
}
