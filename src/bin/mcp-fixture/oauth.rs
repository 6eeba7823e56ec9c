//! The fixture's OAuth-protected mode (`mcp-fixture http --oauth`): `/mcp` becomes an
//! OAuth 2.1 protected resource as the MCP authorization spec (2025-11-25, with the
//! 2025-06-18 and 2025-03-26 discovery fallbacks) describes, and the same origin serves a
//! small in-memory authorization server for it. A test tool: consent is automatic, tokens
//! are opaque random strings, nothing survives a restart.
//!
//! Resource server:
//! - Protected Resource Metadata (RFC 9728) at `/.well-known/oauth-protected-resource/mcp`
//!   (`--oauth-metadata path`, the default), at `/.well-known/oauth-protected-resource`
//!   (`root`), or nowhere (`none`: a 2025-03-26 server, whose authorization server is the
//!   MCP origin itself).
//! - `/mcp` without a bearer token: 401 `WWW-Authenticate: Bearer resource_metadata="…",
//!   scope="…"` (`resource_metadata` left out with `--no-header-metadata` or metadata
//!   `none`, `scope` left out when there are no scopes). An unknown, expired or revoked
//!   token, or one issued for another resource: 401 with `error="invalid_token"`.
//! - Any call of a tool needs the first scope (`read`); a call of the write tool
//!   (`admin_tool`, present only in this mode, or the one `--oauth-write-tool` names) needs
//!   the second one as well (`write`): without it 403 `Bearer error="insufficient_scope",
//!   scope="read write", resource_metadata="…"`.
//!
//! Authorization server (issuer: the origin, `http://127.0.0.1:PORT`):
//! - Metadata: RFC 8414 `/.well-known/oauth-authorization-server` (`--as-metadata oauth`,
//!   the default), OpenID Connect `/.well-known/openid-configuration` (`oidc`), or none
//!   (clients then use the default endpoints `/authorize`, `/token`, `/register`).
//! - `POST /register`: dynamic client registration (RFC 7591), unless `--no-dcr`.
//! - `GET /authorize`: authorization code with PKCE (S256 only), `state`, `resource`
//!   (RFC 8707, must be the MCP URL), automatic consent: 302 to the redirect URI with
//!   `code`, `state` and `iss` (RFC 9207).
//! - `POST /token`: `authorization_code` (PKCE and resource checked) and `refresh_token`
//!   with rotation: a refresh token works once; presenting a used one again revokes its
//!   whole grant (every access and refresh token issued from it).
//! - `POST /revoke`: token revocation (RFC 7009).
//! - Client ids: registered by DCR, `--preregistered ID:SECRET` (any redirect URI), or, with
//!   `--cimd`, an `http(s)` URL whose client metadata document is fetched at each
//!   authorization (loopback allowed: this is a test tool).
//! - Client authentication at `/token` and `/revoke` is the one `--token-auth` advertises
//!   (`client_secret_basic`, `client_secret_post` or `none`; CIMD clients are always public).
//!
//! `GET /oauth-fixture/stats` (no authentication) counts what happened, so that tests can
//! assert e.g. that a registration was reused or a refresh happened, and lists every token
//! issued, so that tests can look for them where they must never appear (logs, answers).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;
const CODE_TTL: Duration = Duration::from_secs(120);

/// Where the Protected Resource Metadata is served.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PrmPlace {
    Path,
    Root,
    None,
}

impl PrmPlace {
    /// Where the protected resource metadata is served, if anywhere.
    fn path(self) -> Option<&'static str> {
        match self {
            PrmPlace::Path => Some("/.well-known/oauth-protected-resource/mcp"),
            PrmPlace::Root => Some("/.well-known/oauth-protected-resource"),
            PrmPlace::None => None,
        }
    }
}

/// Which authorization server metadata document is served.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AsMetadata {
    OAuth,
    Oidc,
    None,
}

impl AsMetadata {
    /// Where the authorization server metadata is served, if anywhere.
    fn path(self) -> Option<&'static str> {
        match self {
            AsMetadata::OAuth => Some("/.well-known/oauth-authorization-server"),
            AsMetadata::Oidc => Some("/.well-known/openid-configuration"),
            AsMetadata::None => None,
        }
    }
}

/// The flags of the OAuth mode.
#[derive(Clone, Debug)]
pub struct OAuthConfig {
    pub scopes: Vec<String>,
    pub write_tool: String,
    pub metadata: PrmPlace,
    pub header_metadata: bool,
    pub as_metadata: AsMetadata,
    /// `client_secret_basic`, `client_secret_post` or `none`.
    pub token_auth: String,
    pub cimd: bool,
    pub preregistered: Option<(String, String)>,
    pub access_ttl: u64,
    pub dcr: bool,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        Self {
            scopes: vec!["read".into(), "write".into()],
            write_tool: "admin_tool".into(),
            metadata: PrmPlace::Path,
            header_metadata: true,
            as_metadata: AsMetadata::OAuth,
            token_auth: "client_secret_basic".into(),
            cimd: false,
            preregistered: None,
            access_ttl: 3600,
            dcr: true,
        }
    }
}

impl OAuthConfig {
    /// Takes one `--oauth-*` (or `--cimd`, `--no-dcr`, ...) argument; `Ok(false)` if it is
    /// not one of them. `value` is the next argument, consumed when the flag takes one.
    pub fn parse_flag(
        &mut self,
        flag: &str,
        value: &mut dyn FnMut() -> Option<String>,
    ) -> Result<bool, String> {
        let mut need = || value().ok_or_else(|| format!("{flag} needs a value"));
        match flag {
            "--oauth-scopes" => {
                self.scopes = need()?.split_whitespace().map(str::to_owned).collect();
            }
            "--oauth-write-tool" => self.write_tool = need()?,
            "--oauth-metadata" => {
                self.metadata = match need()?.as_str() {
                    "path" => PrmPlace::Path,
                    "root" => PrmPlace::Root,
                    "none" => PrmPlace::None,
                    other => return Err(format!("--oauth-metadata path|root|none, not {other}")),
                }
            }
            "--no-header-metadata" => self.header_metadata = false,
            "--as-metadata" => {
                self.as_metadata = match need()?.as_str() {
                    "oauth" => AsMetadata::OAuth,
                    "oidc" => AsMetadata::Oidc,
                    "none" => AsMetadata::None,
                    other => return Err(format!("--as-metadata oauth|oidc|none, not {other}")),
                }
            }
            "--token-auth" => {
                let method = need()?;
                if !["client_secret_basic", "client_secret_post", "none"].contains(&&*method) {
                    return Err(format!(
                        "--token-auth client_secret_basic|client_secret_post|none, not {method}"
                    ));
                }
                self.token_auth = method;
            }
            "--cimd" => self.cimd = true,
            "--preregistered" => {
                let pair = need()?;
                let (id, secret) = pair.split_once(':').unwrap_or((&pair, ""));
                self.preregistered = Some((id.to_owned(), secret.to_owned()));
            }
            "--access-ttl" => {
                self.access_ttl = need()?
                    .parse()
                    .map_err(|_| "--access-ttl takes seconds".to_string())?;
            }
            "--no-dcr" => self.dcr = false,
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn base_scope(&self) -> Option<&str> {
        self.scopes.first().map(String::as_str)
    }

    /// The scopes a call of `tool` needs.
    fn scopes_for_tool(&self, tool: &str) -> Vec<String> {
        let mut needed: Vec<String> = self.scopes.iter().take(1).cloned().collect();
        if tool == self.write_tool
            && let Some(write) = self.scopes.get(1)
        {
            needed.push(write.clone());
        }
        needed
    }
}

#[derive(Clone, Debug)]
struct Client {
    secret: Option<String>,
    /// Empty: any redirect URI (a pre-registered client).
    redirect_uris: Vec<String>,
    /// The token endpoint authentication method it must use.
    auth_method: String,
}

struct Code {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    scopes: Vec<String>,
    resource: Option<String>,
    expires: Instant,
}

/// What a token grants; shared by every token of one authorization ("family").
#[derive(Clone)]
struct Grant {
    client_id: String,
    scopes: Vec<String>,
    resource: Option<String>,
    family: u64,
}

struct AccessToken {
    grant: Grant,
    expires: Instant,
}

struct RefreshToken {
    grant: Grant,
    used: bool,
}

#[derive(Default)]
struct Store {
    clients: HashMap<String, Client>,
    codes: HashMap<String, Code>,
    access: HashMap<String, AccessToken>,
    refresh: HashMap<String, RefreshToken>,
    revoked_families: HashSet<u64>,
    next_family: u64,
    last_authorize: Value,
    /// Every token issued, for tests that look for them where they must not be.
    issued: Vec<String>,
}

impl Store {
    fn revoke_family(&mut self, family: u64) {
        self.revoked_families.insert(family);
        self.access.retain(|_, t| t.grant.family != family);
        self.refresh.retain(|_, t| t.grant.family != family);
    }
}

#[derive(Default)]
struct Stats {
    registrations: AtomicU64,
    authorizations: AtomicU64,
    authorization_errors: AtomicU64,
    token_grants: AtomicU64,
    refreshes: AtomicU64,
    refresh_replays: AtomicU64,
    token_errors: AtomicU64,
    revocations: AtomicU64,
    cimd_fetches: AtomicU64,
    grants_without_resource: AtomicU64,
    prm_fetches: AtomicU64,
    as_metadata_fetches: AtomicU64,
    unauthorized: AtomicU64,
    forbidden: AtomicU64,
    authorized_requests: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

pub struct OAuth {
    config: OAuthConfig,
    /// `http://127.0.0.1:PORT`: the issuer and the origin of every endpoint.
    origin: String,
    store: Mutex<Store>,
    stats: Stats,
    http: reqwest::Client,
}

type Shared = Arc<OAuth>;

fn random_token(bytes: usize) -> String {
    use rand::RngCore;
    let mut buf = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut buf);
    B64URL.encode(buf)
}

fn json_response(status: StatusCode, body: Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    json_response(
        status,
        json!({"error": error, "error_description": description}),
    )
}

fn parse_form(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// Trailing slashes do not make another resource.
fn same_resource(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

impl OAuth {
    pub fn new(config: OAuthConfig, origin: String) -> Shared {
        let mut store = Store::default();
        if let Some((id, secret)) = &config.preregistered {
            store.clients.insert(
                id.clone(),
                Client {
                    secret: Some(secret.clone()),
                    redirect_uris: Vec::new(),
                    auth_method: config.token_auth.clone(),
                },
            );
        }
        Arc::new(Self {
            config,
            origin,
            store: Mutex::new(store),
            stats: Stats::default(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("an HTTP client"),
        })
    }

    fn resource(&self) -> String {
        format!("{}/mcp", self.origin)
    }

    fn prm_url(&self) -> Option<String> {
        let path = self.config.metadata.path()?;
        Some(format!("{}{path}", self.origin))
    }

    fn as_metadata(&self) -> Value {
        let o = &self.origin;
        let mut doc = json!({
            "issuer": o,
            "authorization_endpoint": format!("{o}/authorize"),
            "token_endpoint": format!("{o}/token"),
            "revocation_endpoint": format!("{o}/revoke"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": [self.config.token_auth],
            "revocation_endpoint_auth_methods_supported": [self.config.token_auth],
            "authorization_response_iss_parameter_supported": true,
        });
        if self.config.dcr {
            doc["registration_endpoint"] = json!(format!("{o}/register"));
        }
        if !self.config.scopes.is_empty() {
            doc["scopes_supported"] = json!(self.config.scopes);
        }
        if self.config.cimd {
            doc["client_id_metadata_document_supported"] = json!(true);
        }
        if self.config.as_metadata == AsMetadata::Oidc {
            // The discovery fields OpenID Connect adds; the fixture issues no ID tokens.
            doc["subject_types_supported"] = json!(["public"]);
            doc["id_token_signing_alg_values_supported"] = json!(["RS256"]);
        }
        doc
    }

    /// A `WWW-Authenticate: Bearer ...` value with the given parameters, then
    /// `resource_metadata` when the flags put it there.
    fn challenge(&self, params: &[(&str, String)]) -> HeaderValue {
        let mut parts: Vec<String> = params
            .iter()
            .map(|(name, value)| format!("{name}=\"{value}\""))
            .collect();
        if self.config.header_metadata
            && let Some(url) = self.prm_url()
        {
            // First in a plain challenge (as the spec's example), after error and scope
            // in an error one.
            let at = if params.iter().any(|(name, _)| *name == "error") {
                parts.len().min(2)
            } else {
                0
            };
            parts.insert(at, format!("resource_metadata=\"{url}\""));
        }
        let value = if parts.is_empty() {
            "Bearer".to_owned()
        } else {
            format!("Bearer {}", parts.join(", "))
        };
        HeaderValue::from_str(&value).expect("a header value")
    }

    fn unauthorized(&self, error: Option<&str>, description: &str) -> Response {
        bump(&self.stats.unauthorized);
        let mut params = Vec::new();
        if let Some(error) = error {
            params.push(("error", error.to_owned()));
        }
        if let Some(scope) = self.config.base_scope() {
            params.push(("scope", scope.to_owned()));
        }
        if error.is_some() {
            params.push(("error_description", description.to_owned()));
        }
        let mut response = (StatusCode::UNAUTHORIZED, description.to_owned()).into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, self.challenge(&params));
        response
    }

    fn forbidden(&self, needed: &[String]) -> Response {
        bump(&self.stats.forbidden);
        let params = [
            ("error", "insufficient_scope".to_owned()),
            ("scope", needed.join(" ")),
            (
                "error_description",
                format!("this call needs the scopes {}", needed.join(" ")),
            ),
        ];
        let mut response = (StatusCode::FORBIDDEN, "insufficient scope").into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, self.challenge(&params));
        response
    }

    /// Checks the client's authentication at `/token` and `/revoke` (the method its
    /// registration says). Returns its client id.
    async fn authenticate_client(
        &self,
        headers: &HeaderMap,
        form: &HashMap<String, String>,
    ) -> Result<String, Response> {
        let basic = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
            .and_then(|v| String::from_utf8(v).ok())
            .and_then(|pair| {
                let (id, secret) = pair.split_once(':')?;
                let decode = |s: &str| {
                    url::form_urlencoded::parse(format!("x={s}").as_bytes())
                        .next()
                        .map(|(_, v)| v.into_owned())
                };
                Some((decode(id)?, decode(secret)?))
            });
        let client_id = basic
            .as_ref()
            .map(|(id, _)| id.clone())
            .or_else(|| form.get("client_id").cloned())
            .ok_or_else(|| {
                oauth_error(
                    StatusCode::UNAUTHORIZED,
                    "invalid_client",
                    "no client authentication",
                )
            })?;
        let store = self.store.lock().await;
        let client = store.clients.get(&client_id).ok_or_else(|| {
            oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "unknown client")
        })?;
        let presented = match client.auth_method.as_str() {
            "client_secret_basic" => basic.map(|(_, secret)| secret),
            "client_secret_post" => form.get("client_secret").cloned(),
            _ => return Ok(client_id),
        };
        if presented.is_some() && presented == client.secret {
            Ok(client_id)
        } else {
            let mut response = oauth_error(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                &format!(
                    "this client authenticates with {} and a correct secret",
                    client.auth_method
                ),
            );
            if client.auth_method == "client_secret_basic" {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"mcp-fixture\""),
                );
            }
            Err(response)
        }
    }

    /// Fetches and checks a client id metadata document, and records the client.
    async fn fetch_cimd(&self, client_id: &str) -> Result<Client, String> {
        bump(&self.stats.cimd_fetches);
        let url = url::Url::parse(client_id).map_err(|e| format!("client_id URL: {e}"))?;
        if url.path().is_empty() || url.path() == "/" || url.fragment().is_some() {
            return Err("a client_id URL needs a path and no fragment".into());
        }
        let response = self
            .http
            .get(url)
            .header(header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("fetching the client metadata document: {e}"))?;
        if !response.status().is_success() {
            return Err(format!(
                "the client metadata document answered {}",
                response.status()
            ));
        }
        let document: Value = response
            .json()
            .await
            .map_err(|e| format!("the client metadata document is not JSON: {e}"))?;
        if document["client_id"].as_str() != Some(client_id) {
            return Err("the document's client_id is not its URL".into());
        }
        if document.get("client_secret").is_some() {
            return Err("a client metadata document carries no client_secret".into());
        }
        let method = document["token_endpoint_auth_method"]
            .as_str()
            .unwrap_or("none");
        if method != "none" {
            return Err(format!(
                "token_endpoint_auth_method {method}: the fixture takes only public CIMD clients"
            ));
        }
        let redirect_uris: Vec<String> = document["redirect_uris"]
            .as_array()
            .map(|uris| {
                uris.iter()
                    .filter_map(|u| u.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if redirect_uris.is_empty() {
            return Err("the client metadata document has no redirect_uris".into());
        }
        let client = Client {
            secret: None,
            redirect_uris,
            auth_method: "none".into(),
        };
        self.store
            .lock()
            .await
            .clients
            .insert(client_id.to_owned(), client.clone());
        Ok(client)
    }

    fn issue(&self, store: &mut Store, grant: Grant) -> Value {
        let access = random_token(32);
        let refresh = random_token(32);
        store.issued.extend([access.clone(), refresh.clone()]);
        store.access.insert(
            access.clone(),
            AccessToken {
                grant: grant.clone(),
                expires: Instant::now() + Duration::from_secs(self.config.access_ttl),
            },
        );
        let scope = grant.scopes.join(" ");
        store.refresh.insert(
            refresh.clone(),
            RefreshToken {
                grant: grant.clone(),
                used: false,
            },
        );
        json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.config.access_ttl,
            "refresh_token": refresh,
            "scope": scope,
        })
    }

    /// Checks requested scopes (space separated) against `scopes_supported`; none
    /// requested: the first scope.
    fn requested_scopes(&self, scope: Option<&String>) -> Result<Vec<String>, String> {
        let requested: Vec<String> = scope
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        if requested.is_empty() {
            return Ok(self.config.scopes.iter().take(1).cloned().collect());
        }
        if let Some(unknown) = requested.iter().find(|s| !self.config.scopes.contains(s)) {
            return Err(format!("unknown scope {unknown}"));
        }
        Ok(requested)
    }
}

async fn protected_resource_metadata(State(oauth): State<Shared>) -> Response {
    bump(&oauth.stats.prm_fetches);
    let mut doc = json!({
        "resource": oauth.resource(),
        "authorization_servers": [oauth.origin],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcp-fixture",
    });
    if !oauth.config.scopes.is_empty() {
        doc["scopes_supported"] = json!(oauth.config.scopes);
    }
    json_response(StatusCode::OK, doc)
}

async fn authorization_server_metadata(State(oauth): State<Shared>) -> Response {
    bump(&oauth.stats.as_metadata_fetches);
    json_response(StatusCode::OK, oauth.as_metadata())
}

async fn register(State(oauth): State<Shared>, body: axum::body::Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_client_metadata",
            "the body is not JSON",
        );
    };
    let redirect_uris: Vec<String> = request["redirect_uris"]
        .as_array()
        .map(|uris| {
            uris.iter()
                .filter_map(|u| u.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if redirect_uris.is_empty() {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_redirect_uri",
            "redirect_uris is required",
        );
    }
    if let Some(bad) = redirect_uris.iter().find(|u| url::Url::parse(u).is_err()) {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_redirect_uri",
            &format!("not a URL: {bad}"),
        );
    }
    let method = oauth.config.token_auth.clone();
    if let Some(asked) = request["token_endpoint_auth_method"].as_str()
        && asked != method
    {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_client_metadata",
            &format!("token_endpoint_auth_method {asked} is not supported, only {method}"),
        );
    }
    let client_id = format!("client-{}", random_token(12));
    let secret = (method != "none").then(|| random_token(24));
    bump(&oauth.stats.registrations);
    oauth.store.lock().await.clients.insert(
        client_id.clone(),
        Client {
            secret: secret.clone(),
            redirect_uris: redirect_uris.clone(),
            auth_method: method.clone(),
        },
    );
    let mut response = request.as_object().cloned().unwrap_or_default();
    response.insert("client_id".into(), json!(client_id));
    response.insert(
        "client_id_issued_at".into(),
        json!(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        ),
    );
    response.insert("redirect_uris".into(), json!(redirect_uris));
    response.insert("token_endpoint_auth_method".into(), json!(method));
    response.insert(
        "grant_types".into(),
        json!(["authorization_code", "refresh_token"]),
    );
    response.insert("response_types".into(), json!(["code"]));
    if let Some(secret) = secret {
        response.insert("client_secret".into(), json!(secret));
        response.insert("client_secret_expires_at".into(), json!(0));
    }
    json_response(StatusCode::CREATED, Value::Object(response))
}

fn redirect(to: &url::Url) -> Response {
    (
        StatusCode::FOUND,
        [(header::LOCATION, to.as_str().to_owned())],
    )
        .into_response()
}

async fn authorize(
    State(oauth): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let get = |name: &str| query.get(name).map(String::as_str);
    // Errors before the client and its redirect URI are known are shown, never redirected.
    let Some(client_id) = get("client_id") else {
        bump(&oauth.stats.authorization_errors);
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "client_id is required",
        );
    };
    let known = oauth.store.lock().await.clients.get(client_id).cloned();
    let client = match known {
        Some(client) if !client_id.starts_with("http") || !oauth.config.cimd => client,
        _ if oauth.config.cimd
            && (client_id.starts_with("https://") || client_id.starts_with("http://")) =>
        {
            match oauth.fetch_cimd(client_id).await {
                Ok(client) => client,
                Err(e) => {
                    bump(&oauth.stats.authorization_errors);
                    return oauth_error(StatusCode::BAD_REQUEST, "invalid_client", &e);
                }
            }
        }
        _ => {
            bump(&oauth.stats.authorization_errors);
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_client",
                "unknown client_id",
            );
        }
    };
    let Some(redirect_uri) = get("redirect_uri") else {
        bump(&oauth.stats.authorization_errors);
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "redirect_uri is required",
        );
    };
    let registered =
        client.redirect_uris.is_empty() || client.redirect_uris.iter().any(|u| u == redirect_uri);
    let Some(mut target) = url::Url::parse(redirect_uri).ok().filter(|_| registered) else {
        bump(&oauth.stats.authorization_errors);
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "redirect_uri does not exactly match a registered one",
        );
    };
    {
        let mut store = oauth.store.lock().await;
        store.last_authorize = json!({
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": get("scope"),
            "resource": get("resource"),
            "state": get("state"),
        });
    }
    let fail = |mut target: url::Url, error: &str, description: &str| {
        bump(&oauth.stats.authorization_errors);
        {
            let mut pairs = target.query_pairs_mut();
            pairs.append_pair("error", error);
            pairs.append_pair("error_description", description);
            if let Some(state) = get("state") {
                pairs.append_pair("state", state);
            }
            pairs.append_pair("iss", &oauth.origin);
        }
        redirect(&target)
    };
    if get("response_type") != Some("code") {
        return fail(
            target,
            "unsupported_response_type",
            "response_type must be code",
        );
    }
    let Some(challenge) = get("code_challenge") else {
        return fail(
            target,
            "invalid_request",
            "code_challenge is required (PKCE)",
        );
    };
    if get("code_challenge_method") != Some("S256") {
        return fail(
            target,
            "invalid_request",
            "code_challenge_method must be S256",
        );
    }
    let resource = get("resource").map(str::to_owned);
    if let Some(resource) = &resource
        && !same_resource(resource, &oauth.resource())
    {
        return fail(
            target,
            "invalid_target",
            &format!("resource must be {}", oauth.resource()),
        );
    }
    let scopes = match oauth.requested_scopes(query.get("scope")) {
        Ok(scopes) => scopes,
        Err(e) => return fail(target, "invalid_scope", &e),
    };
    let code = random_token(24);
    oauth.store.lock().await.codes.insert(
        code.clone(),
        Code {
            client_id: client_id.to_owned(),
            redirect_uri: redirect_uri.to_owned(),
            challenge: challenge.to_owned(),
            scopes,
            resource,
            expires: Instant::now() + CODE_TTL,
        },
    );
    bump(&oauth.stats.authorizations);
    {
        let mut pairs = target.query_pairs_mut();
        pairs.append_pair("code", &code);
        if let Some(state) = get("state") {
            pairs.append_pair("state", state);
        }
        pairs.append_pair("iss", &oauth.origin);
    }
    redirect(&target)
}

async fn token(
    State(oauth): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form = parse_form(&body);
    let response = token_inner(&oauth, &headers, &form).await;
    if !response.status().is_success() {
        bump(&oauth.stats.token_errors);
    }
    response
}

async fn token_inner(
    oauth: &OAuth,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Response {
    let client_id = match oauth.authenticate_client(headers, form).await {
        Ok(id) => id,
        Err(response) => return response,
    };
    let invalid_grant =
        |description: &str| oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", description);
    match form.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            let mut store = oauth.store.lock().await;
            let Some(code) = form.get("code").and_then(|c| store.codes.remove(c)) else {
                return invalid_grant("unknown or used authorization code");
            };
            if code.expires < Instant::now() {
                return invalid_grant("the authorization code expired");
            }
            if code.client_id != client_id {
                return invalid_grant("the code was issued to another client");
            }
            if form.get("redirect_uri") != Some(&code.redirect_uri) {
                return invalid_grant("redirect_uri differs from the authorization request");
            }
            let Some(verifier) = form.get("code_verifier") else {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "code_verifier is required",
                );
            };
            if B64URL.encode(Sha256::digest(verifier.as_bytes())) != code.challenge {
                return invalid_grant("PKCE verification failed");
            }
            let resource = match (form.get("resource"), &code.resource) {
                (Some(given), _) if !same_resource(given, &oauth.resource()) => {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_target",
                        &format!("resource must be {}", oauth.resource()),
                    );
                }
                (Some(given), _) => Some(given.clone()),
                (None, authorized) => authorized.clone(),
            };
            if resource.is_none() {
                bump(&oauth.stats.grants_without_resource);
            }
            let family = store.next_family;
            store.next_family += 1;
            let grant = Grant {
                client_id,
                scopes: code.scopes,
                resource,
                family,
            };
            bump(&oauth.stats.token_grants);
            json_response(StatusCode::OK, oauth.issue(&mut store, grant))
        }
        Some("refresh_token") => {
            let mut store = oauth.store.lock().await;
            let Some(presented) = form.get("refresh_token") else {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "refresh_token is required",
                );
            };
            let Some(refresh) = store.refresh.get(presented) else {
                return invalid_grant("unknown or revoked refresh token");
            };
            if refresh.grant.client_id != client_id {
                return invalid_grant("the refresh token was issued to another client");
            }
            if refresh.used {
                // A rotated-out token presented again: someone else may hold it.
                let family = refresh.grant.family;
                store.revoke_family(family);
                bump(&oauth.stats.refresh_replays);
                return invalid_grant(
                    "refresh token already used; every token of its grant is revoked",
                );
            }
            let mut grant = refresh.grant.clone();
            if let Some(scope) = form.get("scope") {
                let narrower: Vec<String> = scope.split_whitespace().map(str::to_owned).collect();
                if narrower.iter().any(|s| !grant.scopes.contains(s)) {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_scope",
                        "a refresh cannot widen the scope",
                    );
                }
                grant.scopes = narrower;
            }
            if let Some(given) = form.get("resource")
                && !same_resource(given, &oauth.resource())
            {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_target",
                    &format!("resource must be {}", oauth.resource()),
                );
            }
            if let Some(refresh) = store.refresh.get_mut(presented) {
                refresh.used = true;
            }
            bump(&oauth.stats.refreshes);
            json_response(StatusCode::OK, oauth.issue(&mut store, grant))
        }
        other => oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            &format!("grant_type {}", other.unwrap_or("(none)")),
        ),
    }
}

async fn revoke(
    State(oauth): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form = parse_form(&body);
    let client_id = match oauth.authenticate_client(&headers, &form).await {
        Ok(id) => id,
        Err(response) => return response,
    };
    let Some(token) = form.get("token") else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "token is required",
        );
    };
    let mut store = oauth.store.lock().await;
    if let Some(access) = store.access.get(token) {
        if access.grant.client_id == client_id {
            store.access.remove(token);
        }
    } else if let Some(refresh) = store.refresh.get(token)
        && refresh.grant.client_id == client_id
    {
        // RFC 7009 2.1: revoking a refresh token revokes the grant's access tokens too.
        let family = refresh.grant.family;
        store.revoke_family(family);
    }
    bump(&oauth.stats.revocations);
    // Unknown tokens answer 200 as well (RFC 7009 2.2).
    StatusCode::OK.into_response()
}

async fn stats(State(oauth): State<Shared>) -> Response {
    let s = &oauth.stats;
    let n = |c: &AtomicU64| c.load(Ordering::SeqCst);
    let store = oauth.store.lock().await;
    json_response(
        StatusCode::OK,
        json!({
            "registrations": n(&s.registrations),
            "authorizations": n(&s.authorizations),
            "authorization_errors": n(&s.authorization_errors),
            "token_grants": n(&s.token_grants),
            "refreshes": n(&s.refreshes),
            "refresh_replays": n(&s.refresh_replays),
            "token_errors": n(&s.token_errors),
            "revocations": n(&s.revocations),
            "cimd_fetches": n(&s.cimd_fetches),
            "grants_without_resource": n(&s.grants_without_resource),
            "prm_fetches": n(&s.prm_fetches),
            "as_metadata_fetches": n(&s.as_metadata_fetches),
            "unauthorized": n(&s.unauthorized),
            "forbidden": n(&s.forbidden),
            "authorized_requests": n(&s.authorized_requests),
            "clients": store.clients.len(),
            "live_access_tokens": store.access.len(),
            "last_authorize": store.last_authorize,
            "issued_tokens": store.issued,
        }),
    )
}

/// The names of the tools a JSON-RPC body (one message or a batch) calls.
fn called_tools(body: &[u8]) -> Vec<String> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let messages = match value {
        Value::Array(items) => items,
        single => vec![single],
    };
    messages
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| m["params"]["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The bearer check in front of `/mcp`.
pub async fn guard(
    State(oauth): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !request.uri().path().starts_with("/mcp") {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|v| v.trim().to_owned());
    let Some(presented) = presented else {
        return oauth.unauthorized(None, "authorization required");
    };
    let grant = {
        let store = oauth.store.lock().await;
        match store.access.get(&presented) {
            None => None,
            Some(token) if token.expires < Instant::now() => None,
            Some(token) if store.revoked_families.contains(&token.grant.family) => None,
            Some(token) => Some(token.grant.clone()),
        }
    };
    let Some(grant) = grant else {
        return oauth.unauthorized(Some("invalid_token"), "unknown, expired or revoked token");
    };
    if let Some(resource) = &grant.resource
        && !same_resource(resource, &oauth.resource())
    {
        return oauth.unauthorized(Some("invalid_token"), "token issued for another resource");
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "body too large").into_response();
    };
    for tool in called_tools(&bytes) {
        let needed = oauth.config.scopes_for_tool(&tool);
        if needed.iter().any(|s| !grant.scopes.contains(s)) {
            return oauth.forbidden(&needed);
        }
    }
    bump(&oauth.stats.authorized_requests);
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

/// The metadata, authorization server and stats routes, for `origin`.
pub fn routes(oauth: Shared) -> axum::Router {
    let mut router = axum::Router::new()
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route("/revoke", post(revoke))
        .route("/oauth-fixture/stats", get(stats));
    if let Some(path) = oauth.config.metadata.path() {
        router = router.route(path, get(protected_resource_metadata));
    }
    if let Some(path) = oauth.config.as_metadata.path() {
        router = router.route(path, get(authorization_server_metadata));
    }
    if oauth.config.dcr {
        router = router.route("/register", post(register));
    }
    router.with_state(oauth)
}
