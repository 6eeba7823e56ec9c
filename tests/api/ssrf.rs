//! The URL policy holds at the socket: names that resolve to internal addresses only after
//! the URL was saved (DNS rebinding, late-registered names) are never dialled, by the MCP
//! client nor by a Xiaozhi bridge, and upstream bodies never come back in error messages.
//!
//! DNS cannot be steered here, so a scripted resolver plays an attacker's name server:
//! it answers "no such name" or a public address first and the real, loopback answer
//! after. The machine's own host name is used, so that before the fix (when clients
//! resolved names themselves) the dial really reached the loopback listener.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use mcp_pool::security::NameLookup;
use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::helpers::{Reply, TestApp, spawn_app_resolving};
use crate::upstreams::{counting_listener, eventually};

/// Answers in turn from `script` (the last answer repeats); `None` is "no such name".
struct ScriptedDns {
    name: String,
    script: Vec<Option<IpAddr>>,
    asked: AtomicUsize,
}

impl NameLookup for ScriptedDns {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let answer = if host == self.name {
            let turn = self.asked.fetch_add(1, Ordering::SeqCst);
            self.script[turn.min(self.script.len() - 1)]
        } else {
            None
        };
        Box::pin(async move {
            answer
                .map(|ip| vec![ip])
                .ok_or_else(|| std::io::Error::other("no such name"))
        })
    }
}

/// This machine's host name and the loopback address the system resolves it to, when it
/// does (Debian's /etc/hosts maps it to 127.0.x.1).
async fn host_name_on_loopback() -> Option<(String, IpAddr)> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().to_owned();
    let ip = tokio::net::lookup_host((name.as_str(), 0))
        .await
        .ok()?
        .map(|a| a.ip())
        .find(|ip| ip.is_loopback())?;
    Some((name, ip))
}

/// A service with the default policy (no loopback) and a scripted DNS for `name`.
pub(crate) async fn strict_app(name: &str, script: Vec<Option<IpAddr>>) -> TestApp {
    let dns = Arc::new(ScriptedDns {
        name: name.to_owned(),
        script,
        asked: AtomicUsize::new(0),
    });
    spawn_app_resolving(Some(dns), |s| s.security.allow_loopback_urls = false).await
}

const PUBLIC: &str = "93.184.216.34";

/// Creates user `u`'s streamable-HTTP server at `url` and asks to connect to it now.
async fn create_and_connect(app: &TestApp, name: &str, url: impl AsRef<str>) -> Reply {
    let id = app
        .create_server_ok(
            "u",
            json!({"name": name, "type": "streamableHttp", "baseUrl": url.as_ref()}),
        )
        .await;
    app.user(
        "u",
        Method::POST,
        &format!("/api/mcp-servers/{id}/connect"),
        None,
    )
    .await
}

#[tokio::test]
async fn a_name_that_rebinds_to_loopback_after_its_checks_is_never_dialled() {
    let Some((name, loopback)) = host_name_on_loopback().await else {
        eprintln!("skipped: this machine's host name does not resolve to loopback");
        return;
    };
    let (port, accepted) = counting_listener(loopback).await.unwrap();
    // Saved while the name did not resolve; public when the connection is built; then
    // the name server answers with the machine's loopback address.
    let app = strict_app(
        &name,
        vec![None, Some(PUBLIC.parse().unwrap()), Some(loopback)],
    )
    .await;
    let connect = create_and_connect(&app, "rebind", format!("http://{name}:{port}/mcp")).await;
    assert!(
        connect.status.is_client_error() || connect.status.is_server_error(),
        "{}",
        connect.text
    );
    assert!(
        connect.text.contains("loopback") || connect.body["error"]["code"] == "URL_NOT_ALLOWED",
        "the refusal names the policy: {}",
        connect.text
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "nothing dialled the loopback listener"
    );
}

#[tokio::test]
async fn a_name_resolving_to_metadata_when_used_is_refused_with_a_clear_error() {
    let app = strict_app(
        "late.example",
        vec![None, Some("169.254.169.254".parse().unwrap())],
    )
    .await;
    let connect = create_and_connect(&app, "late", "http://late.example/latest/meta-data").await;
    assert_eq!(connect.status, StatusCode::FORBIDDEN, "{}", connect.text);
    assert_eq!(connect.code(), "URL_NOT_ALLOWED");
    assert!(connect.text.contains("metadata"), "{}", connect.text);
}

#[tokio::test]
async fn a_xiaozhi_bridge_never_dials_an_endpoint_that_now_resolves_to_loopback() {
    let Some((name, loopback)) = host_name_on_loopback().await else {
        eprintln!("skipped: this machine's host name does not resolve to loopback");
        return;
    };
    let (port, accepted) = counting_listener(loopback).await.unwrap();
    let app = strict_app(&name, vec![None, Some(loopback)]).await;
    let put = app
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a1/xiaozhi",
            Some(json!({"endpoint": format!("ws://{name}:{port}/mcp/?token=t")})),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    let status = || async {
        app.admin(Method::GET, "/admin/xiaozhi", None).await.body["bridges"][0].clone()
    };
    eventually("the bridge tried and failed", || async {
        status().await["lastError"].is_string()
    })
    .await;
    let last_error = status().await["lastError"].to_string();
    assert!(last_error.contains("loopback"), "{last_error}");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing dialled");
}

#[tokio::test]
async fn an_upstream_error_body_is_not_relayed_to_the_caller() {
    // An HTTP server that answers every request with a long JSON document (not a
    // JSON-RPC error), like a metadata service would: rmcp keeps such a body as the
    // error's text.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = json!({"AccessKey": "SECRET-FROM-THE-INSIDE", "Code": "Success",
        "Padding": "p".repeat(300)})
    .to_string();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    let app = crate::helpers::spawn_pool_app().await;
    let connect = create_and_connect(&app, "leaky", format!("http://127.0.0.1:{port}/mcp")).await;
    assert_eq!(connect.status, StatusCode::BAD_GATEWAY, "{}", connect.text);
    assert!(
        !connect.text.contains("SECRET-FROM-THE-INSIDE"),
        "{}",
        connect.text
    );
}
