//! Every dial the service makes on a user's or a server's behalf goes through the URL
//! policy, whatever spelling the host has and wherever a server's metadata points; and what
//! one user's server claims about an authorization server never chooses another user's
//! OAuth client.
//!
//! Hostile MCP and authorization servers are scripted HTTP servers on 127.0.0.1, which the
//! policy allows (`allowed_url_hosts`); 127.0.0.2 and [::1] stand in for the addresses it
//! forbids (a cloud metadata service, an internal network): listeners there only count
//! who connects.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode as AxumStatus;
use axum::response::Response;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::helpers::{Reply, TestApp, spawn_app_with};

/// What a scripted path answers.
#[derive(Clone)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

fn json_answer(value: Value) -> Answer {
    Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: value.to_string(),
    }
}

/// A scripted HTTP server on 127.0.0.1: each path answers what the test set.
#[derive(Clone)]
struct Scripted {
    base: String,
    routes: Arc<Mutex<HashMap<String, Answer>>>,
}

impl Scripted {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let routes: Arc<Mutex<HashMap<String, Answer>>> = Arc::default();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(routes.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base, routes }
    }

    fn route(&self, path: &str, answer: Answer) {
        self.routes.lock().unwrap().insert(path.to_owned(), answer);
    }

    /// An MCP endpoint at `/mcp` that wants a token, pointing at its resource metadata,
    /// which names `authorization_servers`.
    fn protected_mcp(&self, authorization_servers: Value) {
        let prm = format!("{}/.well-known/oauth-protected-resource/mcp", self.base);
        self.route(
            "/mcp",
            Answer {
                status: 401,
                headers: vec![(
                    "www-authenticate".into(),
                    format!("Bearer resource_metadata=\"{prm}\""),
                )],
                body: String::new(),
            },
        );
        self.route(
            "/.well-known/oauth-protected-resource/mcp",
            json_answer(json!({
                "resource": format!("{}/mcp", self.base),
                "authorization_servers": authorization_servers,
            })),
        );
    }

    /// Authorization server metadata at the RFC 8414 URL of issuer `self.base`, with
    /// `overrides` laid over sound endpoints on this server.
    fn authorization_server(&self, overrides: Value) {
        let mut metadata = json!({
            "issuer": self.base,
            "authorization_endpoint": format!("{}/authorize", self.base),
            "token_endpoint": format!("{}/token", self.base),
            "registration_endpoint": format!("{}/register", self.base),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
        });
        for (key, value) in overrides.as_object().unwrap() {
            metadata[key] = value.clone();
        }
        self.route(
            "/.well-known/oauth-authorization-server",
            json_answer(metadata),
        );
        self.registers_as("real-client");
    }

    fn registers_as(&self, client_id: &str) {
        self.route(
            "/register",
            Answer {
                status: 201,
                headers: vec![("content-type".into(), "application/json".into())],
                body: json!({"client_id": client_id}).to_string(),
            },
        );
    }
}

async fn answer(
    State(routes): State<Arc<Mutex<HashMap<String, Answer>>>>,
    request: Request,
) -> Response {
    let found = routes.lock().unwrap().get(request.uri().path()).cloned();
    let Some(found) = found else {
        return Response::builder()
            .status(AxumStatus::NOT_FOUND)
            .body(Body::empty())
            .unwrap();
    };
    let mut response = Response::builder().status(found.status);
    for (name, value) in &found.headers {
        response = response.header(name, value);
    }
    response.body(Body::from(found.body)).unwrap()
}

/// A listener on a forbidden address that only counts connections; None when this machine
/// has no such address (IPv6 off).
async fn forbidden(ip: &str) -> Option<(String, Arc<AtomicUsize>)> {
    let ip: IpAddr = ip.parse().unwrap();
    let (port, accepted) = crate::upstreams::counting_listener(ip).await.ok()?;
    let url = match ip {
        IpAddr::V4(v4) => format!("http://{v4}:{port}"),
        IpAddr::V6(v6) => format!("http://[{v6}]:{port}"),
    };
    Some((url, accepted))
}

/// A service whose policy allows 127.0.0.1 alone among loopback and private addresses.
async fn strict_app() -> TestApp {
    spawn_app_with(|s| {
        s.security.allow_loopback_urls = false;
        s.security.allow_private_urls = false;
        s.security.allowed_url_hosts = vec!["127.0.0.1".into()];
    })
    .await
}

async fn authorize(app: &TestApp, user: &str, mcp: &Scripted) -> Reply {
    let server = app
        .create_server_ok(
            user,
            json!({"name": format!("hostile-{}", uuid::Uuid::new_v4().simple()),
                   "type": "streamableHttp", "baseUrl": format!("{}/mcp", mcp.base)}),
        )
        .await;
    crate::oauth::start(app, user, &server).await
}

#[tokio::test]
async fn endpoints_an_authorization_server_names_at_forbidden_addresses_are_never_dialled() {
    let app = strict_app().await;
    let mut forbidden_listeners = vec![forbidden("127.0.0.2").await.unwrap()];
    forbidden_listeners.extend(forbidden("::1").await);
    for (target, accepted) in &forbidden_listeners {
        for field in [
            "registration_endpoint",
            "token_endpoint",
            "revocation_endpoint",
            "jwks_uri",
        ] {
            let hostile = Scripted::start().await;
            hostile.protected_mcp(json!([hostile.base]));
            hostile.authorization_server(json!({ field: format!("{target}/{field}") }));
            let started = authorize(&app, "mallory", &hostile).await;
            assert_eq!(
                (started.status, started.code()),
                (StatusCode::BAD_GATEWAY, "OAUTH_METADATA_REFUSED"),
                "{field} at {target}: {}",
                started.text
            );
            assert!(
                started.text.contains(field) && started.text.contains("does not allow"),
                "the error names the endpoint and why: {}",
                started.text
            );
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 0, "{target} was dialled");
    }
}

#[tokio::test]
async fn an_authorization_server_at_a_forbidden_literal_or_redirecting_to_one_is_never_dialled() {
    let app = strict_app().await;
    let (target, accepted) = forbidden("127.0.0.2").await.unwrap();
    // Named by the resource metadata itself: rmcp fetches its metadata through the
    // service's client, and the dialer refuses the connection.
    let named = Scripted::start().await;
    named.protected_mcp(json!([target]));
    let started = authorize(&app, "mallory", &named).await;
    assert!(started.status.is_client_error() || started.status.is_server_error());
    // Reached by a redirect from an allowed host.
    let redirecting = Scripted::start().await;
    redirecting.protected_mcp(json!([redirecting.base]));
    redirecting.route(
        "/.well-known/oauth-authorization-server",
        Answer {
            status: 302,
            headers: vec![(
                "location".into(),
                format!("{target}/.well-known/oauth-authorization-server"),
            )],
            body: String::new(),
        },
    );
    let started = authorize(&app, "mallory", &redirecting).await;
    assert!(
        started.status.is_client_error() || started.status.is_server_error(),
        "{}",
        started.text
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "{target} was dialled");
}

#[tokio::test]
async fn one_users_server_cannot_plant_the_oauth_client_another_user_gets() {
    let app = strict_app().await;
    // The real authorization server (and MCP server) alice uses.
    let real = Scripted::start().await;
    real.protected_mcp(json!([real.base]));
    real.authorization_server(json!({}));
    // Mallory's server names its own metadata at a non-standard well-known URL, claiming
    // the real issuer, with its own registration endpoint.
    let mallory = Scripted::start().await;
    mallory.protected_mcp(json!([format!(
        "{}/.well-known/custom-as-metadata",
        mallory.base
    )]));
    mallory.route(
        "/.well-known/custom-as-metadata",
        json_answer(json!({
            "issuer": real.base,
            "authorization_endpoint": format!("{}/authorize", real.base),
            "token_endpoint": format!("{}/token", real.base),
            "registration_endpoint": format!("{}/register", mallory.base),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        })),
    );
    mallory.registers_as("mallory-client");
    let planted = authorize(&app, "mallory", &mallory).await;
    assert_eq!(
        planted.code(),
        "OAUTH_DISCOVERY_FAILED",
        "metadata claiming another issuer is refused: {}",
        planted.text
    );

    let alice = authorize(&app, "alice", &real).await;
    assert_eq!(alice.status, StatusCode::OK, "{}", alice.text);
    let url = url::Url::parse(alice.body["authorizationUrl"].as_str().unwrap()).unwrap();
    let client_id = url
        .query_pairs()
        .find(|(name, _)| name == "client_id")
        .map(|(_, value)| value.into_owned());
    assert_eq!(client_id.as_deref(), Some("real-client"), "{url}");
}

#[tokio::test]
async fn only_https_authorization_urls_are_handed_to_a_person() {
    let app = strict_app().await;
    for endpoint in [
        "javascript:alert(document.cookie)//",
        "data:text/html,<script>alert(1)</script>",
        "http://auth.example.com/authorize",
    ] {
        let hostile = Scripted::start().await;
        hostile.protected_mcp(json!([hostile.base]));
        hostile.authorization_server(json!({ "authorization_endpoint": endpoint }));
        let started = authorize(&app, "mallory", &hostile).await;
        assert_eq!(
            (started.status, started.code()),
            (StatusCode::BAD_GATEWAY, "OAUTH_METADATA_REFUSED"),
            "{endpoint}: {}",
            started.text
        );
        assert!(
            started.body["authorizationUrl"].is_null(),
            "{}",
            started.text
        );
    }
}

#[tokio::test]
async fn an_oversized_registration_answer_is_refused_not_held() {
    let app = strict_app().await;
    let hostile = Scripted::start().await;
    hostile.protected_mcp(json!([hostile.base]));
    hostile.authorization_server(json!({}));
    let padding = "x".repeat(4 * 1024 * 1024);
    hostile.route(
        "/register",
        Answer {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: json!({"client_id": "big", "padding": padding}).to_string(),
        },
    );
    let started = authorize(&app, "mallory", &hostile).await;
    assert!(
        started.status.is_server_error() && started.text.contains("exceeds"),
        "{} {}",
        started.status,
        started.text
    );
}

/// Every outbound HTTP client of the service is built by `security::Dialer` (clippy's
/// `disallowed_methods` enforces the same at compile time); the only exceptions are named
/// here with their reason.
#[test]
fn every_outbound_client_is_built_by_the_dialer() {
    const BUILDERS: [&str; 11] = [
        "Client::builder(",
        "Client::new(",
        "Client::default(",
        "ClientBuilder::new(",
        "ClientBuilder::default(",
        "reqwest::get(",
        // rmcp's constructors that build a client of their own.
        "::from_uri(",
        "AuthorizationManager::new(",
        "connect_async(",
        "client_async",
        "TcpStream::connect(",
    ];
    // (file, why it may build or dial itself)
    let allowed: [(&str, &str); 6] = [
        ("crates/core/src/security/dialer.rs", "the dialer"),
        (
            "crates/core/src/security/url_guard.rs",
            "UrlPolicy::dial connects to resolved, checked addresses",
        ),
        (
            "crates/services/src/gateway/xiaozhi.rs",
            "WebSocket over a stream UrlPolicy::dial opened",
        ),
        (
            "crates/llm/src/lib.rs",
            "the operator's configured LLM providers",
        ),
        ("src/api.rs", "a test of its own listener"),
        (
            "crates/services/src/services/catalog/registry.rs",
            "a Registry API the operator names in an admin request",
        ),
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    // The service's crates; the fixture (crates/fixture) is a test server, not the service.
    let mut stack = vec![root.join("src")];
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let krate = krate.unwrap().path();
        if !krate.ends_with("fixture") {
            stack.push(krate.join("src"));
        }
    }
    assert!(stack.len() >= 6, "the service's crates are found");
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            for (number, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                // A builder name itself, not the end of another (`LlmClient::new(`).
                let builds = BUILDERS.iter().any(|b| {
                    line.match_indices(b).any(|(at, _)| {
                        !line[..at]
                            .chars()
                            .next_back()
                            .is_some_and(|c| c.is_alphanumeric() || c == '_')
                    })
                });
                if builds && !allowed.iter().any(|(file, _)| *file == relative) {
                    found.push(format!("{relative}:{}: {}", number + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "outbound clients built outside security::Dialer:\n{}",
        found.join("\n")
    );
}
