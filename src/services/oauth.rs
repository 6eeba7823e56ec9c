//! Per-user OAuth of remote MCP servers (the MCP authorization spec): starting an
//! authorization, completing it at the callback, reading and forgetting it, and handing
//! each connection its user's tokens.
//!
//! Discovery, registration, PKCE, the token exchange and refreshes are rmcp's
//! `AuthorizationManager`; this service decides which client identity to use, keeps the
//! flow in the database between the start and the callback (which may reach another
//! instance), and stores the tokens per (user, server), sealed.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationMetadataSource,
    CredentialStore, InMemoryCredentialStore, OAuthClientConfig, OAuthHttpClient,
    StoredAuthorizationState, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use url::Url;
use uuid::Uuid;

use crate::cluster::{Cluster, Note};
use crate::config::Settings;
use crate::domain::{McpServer, RemoteEndpoint, UserId};
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::mcp::McpError;
use crate::mcp::auth::{AuthChallenge, UpstreamAuth};
use crate::oauth::{CapturedState, OAuthError, PolicyHttp, TokenStore};
use crate::pool::Pool;
use crate::store::{Grant, PendingFlow, Store, TokenRecord};

/// What a new authorization gives its user: the URL to open, valid until `expires_at`.
#[derive(Debug, Clone)]
pub struct AuthorizationStart {
    pub authorization_url: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthStatus {
    /// The server never asked this user for authorization.
    NotRequired,
    /// It asked, and there are no tokens.
    Required,
    Authorized,
    /// The access token expired and there is no refresh token.
    Expired,
}

impl OAuthStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OAuthStatus::NotRequired => "not_required",
            OAuthStatus::Required => "required",
            OAuthStatus::Authorized => "authorized",
            OAuthStatus::Expired => "expired",
        }
    }
}

pub struct StatusReport {
    pub status: OAuthStatus,
    pub issuer: Option<String>,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// The query the authorization server redirects the browser back with.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct CallbackParams {
    pub code: Option<String>,
    pub state: Option<String>,
    /// RFC 9207: the issuer, checked when the authorization server says it sends it.
    pub iss: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// How a callback ended, for the page or redirect the browser gets.
pub struct CallbackOutcome {
    pub server: Option<Uuid>,
    pub authorized: bool,
    pub message: String,
}

/// The client and authorization server metadata a grant belongs to: what refreshing and
/// revoking need, without a new discovery.
#[derive(Clone, Serialize, Deserialize)]
struct ClientRecord {
    metadata: AuthorizationMetadata,
    client_id: String,
    client_secret: Option<String>,
    redirect_uri: String,
    /// The identity the metadata was verified under (see `OAuthService::discover`): what
    /// the grant names as its issuer, whatever the metadata claims. Absent in records kept
    /// before it existed.
    #[serde(default)]
    verified_as: Option<String>,
}

impl ClientRecord {
    fn config(&self) -> OAuthClientConfig {
        let config = OAuthClientConfig::new(&self.client_id, &self.redirect_uri);
        match &self.client_secret {
            Some(secret) => config.with_client_secret(secret),
            None => config,
        }
    }
}

/// An authorization between its start and its callback.
#[derive(Serialize, Deserialize)]
struct Flow {
    state: StoredAuthorizationState,
    client: ClientRecord,
    scopes: Vec<String>,
    step_up: bool,
    /// The resource (see [`resource_of`]) the authorization is for: a callback for a
    /// server that has moved since saves nothing.
    #[serde(default)]
    resource: Option<String>,
}

#[derive(Clone)]
pub struct OAuthService {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    settings: Arc<Settings>,
    http: Arc<PolicyHttp>,
    events: Arc<EventHub>,
    pool: Pool,
    cluster: Cluster,
    /// `http://host:port` once the listener is bound, when `oauth.public_url` is empty.
    bound: OnceLock<String>,
    /// Names this instance in refresh leases.
    holder: String,
}

fn state_hash(state: &str) -> String {
    hex::encode(Sha256::digest(state.as_bytes()))
}

/// The resource (origin and path) a server's tokens are bound to; None for a local server.
pub fn resource_of(spec: &crate::domain::ServerSpec) -> Option<Url> {
    spec.transport.remote().map(resource_url)
}

/// The server's URL as the OAuth resource (RFC 8707): without credentials, query or
/// fragment.
fn resource_url(endpoint: &RemoteEndpoint) -> Url {
    let mut url = endpoint.url.expose().clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url
}

fn server_error(error: impl std::fmt::Display) -> OAuthError {
    OAuthError::AuthorizationServer(crate::mcp::excerpt(&error.to_string()))
}

impl OAuthService {
    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        upstream_http: &crate::mcp::UpstreamHttp,
        events: Arc<EventHub>,
        pool: Pool,
        cluster: Cluster,
    ) -> Self {
        let http = Arc::new(PolicyHttp::new(
            upstream_http,
            Duration::from_secs(settings.pool.connect_timeout_secs),
        ));
        Self {
            inner: Arc::new(Inner {
                store,
                settings,
                http,
                events,
                pool,
                cluster,
                bound: OnceLock::new(),
                holder: Uuid::new_v4().to_string(),
            }),
        }
    }

    /// Called once the HTTP listener is bound: the default public URL needs its port.
    pub fn listening_on(&self, port: u16) {
        let host = match self.inner.settings.server.host.as_str() {
            "0.0.0.0" | "::" | "" => "127.0.0.1".to_owned(),
            host if host.contains(':') => format!("[{host}]"),
            host => host.to_owned(),
        };
        let _ = self.inner.bound.set(format!("http://{host}:{port}"));
    }

    /// The externally reachable base URL (no trailing slash).
    pub fn public_url(&self) -> String {
        let configured = self
            .inner
            .settings
            .oauth
            .public_url
            .trim()
            .trim_end_matches('/');
        if !configured.is_empty() {
            return configured.to_owned();
        }
        self.inner
            .bound
            .get()
            .cloned()
            .unwrap_or_else(|| format!("http://127.0.0.1:{}", self.inner.settings.server.port))
    }

    /// Derived from configuration only, never from a request.
    pub fn redirect_uri(&self) -> String {
        format!("{}/oauth/callback", self.public_url())
    }

    pub fn client_metadata_url(&self) -> String {
        format!("{}/oauth/client-metadata.json", self.public_url())
    }

    /// The Client ID Metadata Document this service publishes (its URL is its client id).
    pub fn client_metadata(&self) -> Value {
        json!({
            "client_id": self.client_metadata_url(),
            "client_name": self.inner.settings.oauth.client_name,
            "redirect_uris": [self.redirect_uri()],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })
    }

    async fn server(&self, user: &UserId, server_id: &str) -> Result<McpServer> {
        let id = Uuid::parse_str(server_id)
            .map_err(|_| Error::NotFound(Resource::McpServer, server_id.to_owned()))?;
        self.inner
            .store
            .servers()
            .get(user, id)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::McpServer, server_id.to_owned()))
    }

    async fn manager(&self, resource: &Url) -> Result<AuthorizationManager, OAuthError> {
        let http: Arc<dyn OAuthHttpClient> = self.inner.http.clone();
        AuthorizationManager::new_with_oauth_http_client(resource.as_str(), http)
            .await
            .map_err(|e| OAuthError::Discovery(crate::mcp::excerpt(&e.to_string())))
    }

    /// `POST /api/mcp-servers/{id}/oauth/authorize`: a new authorization URL.
    pub async fn authorize(&self, user: &UserId, server_id: &str) -> Result<AuthorizationStart> {
        let server = self.server(user, server_id).await?;
        self.start(user, &server, None).await
    }

    /// Asks the server without a token for its challenge (what discovery starts from).
    async fn probe(&self, endpoint: &RemoteEndpoint, streamable: bool) -> Option<String> {
        let http = &self.inner.http;
        let url = endpoint.url.expose().as_str();
        let mut request = if streamable {
            http.request(reqwest::Method::POST, url)
                .ok()?
                .header("accept", "application/json, text/event-stream")
                .json(&json!({
                    "jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                               "clientInfo": {"name": "mcp-pool", "version": env!("CARGO_PKG_VERSION")}}
                }))
        } else {
            http.request(reqwest::Method::GET, url)
                .ok()?
                .header("accept", "text/event-stream")
        };
        for (name, value) in endpoint.headers.expose() {
            if !name.eq_ignore_ascii_case("authorization") {
                request = request.header(name, value);
            }
        }
        let response = request.send().await.ok()?;
        if response.status() != reqwest::StatusCode::UNAUTHORIZED {
            return None;
        }
        response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// Starts an authorization of `server` for `user`. `challenge` is the refusal that
    /// led here, if any; a 403 `insufficient_scope` asks for the union of the scopes.
    async fn start(
        &self,
        user: &UserId,
        server: &McpServer,
        challenge: Option<&AuthChallenge>,
    ) -> Result<AuthorizationStart> {
        let endpoint = server
            .spec
            .transport
            .remote()
            .ok_or(OAuthError::NotRemote)?;
        let settings = &self.inner.settings.oauth;
        let repo = self.inner.store.oauth();
        let now = Utc::now();
        // Flows nobody completed are dropped here: one small delete per start.
        repo.purge_expired(now).await?;
        if repo.count_pending(user).await? >= settings.max_pending_per_user {
            return Err(Error::LimitReached(format!(
                "at most {} authorizations may be in progress per user; finish or let one expire",
                settings.max_pending_per_user
            )));
        }
        let step_up = challenge.is_some_and(|c| c.insufficient_scope);
        let header = match challenge {
            Some(c) => Some(c.www_authenticate.clone()),
            None => {
                let streamable = matches!(
                    server.spec.transport,
                    crate::domain::Transport::StreamableHttp(_)
                );
                self.probe(endpoint, streamable).await
            }
        };
        let resource = resource_url(endpoint);
        let mut manager = self.manager(&resource).await?;
        let (metadata, verified_as) = self
            .discover(&manager, &resource, header.as_deref())
            .await?;
        self.check_endpoints(&metadata).await?;
        manager.set_metadata(metadata.clone());
        let configured: Vec<&str> = endpoint.oauth.scopes.iter().map(String::as_str).collect();
        let mut scopes = manager.select_initial_scopes(&configured).await;
        let granted = repo.token(user, server.id).await?;
        if step_up {
            let previous = granted
                .as_ref()
                .map(|t| t.scopes.clone())
                .unwrap_or_default();
            let challenged = challenge.map(AuthChallenge::scopes).unwrap_or_default();
            for scope in previous.into_iter().chain(challenged) {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
        } else if granted.is_some() {
            repo.reset_step_ups(user, server.id).await?;
        }
        let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let client = self
            .client_identity(&metadata, &verified_as, endpoint)
            .await?;
        manager
            .configure_client(client.config())
            .map_err(server_error)?;
        let captured = CapturedState::default();
        manager.set_state_store(captured.clone());
        let authorization_url = manager
            .get_authorization_url(&scope_refs)
            .await
            .map_err(server_error)?;
        let (csrf, state) = captured
            .take()
            .ok_or_else(|| Error::Unexpected(anyhow::anyhow!("rmcp kept no PKCE state")))?;
        let expires_at = now + chrono::Duration::seconds(settings.state_ttl_secs as i64);
        let flow = Flow {
            state,
            client,
            scopes,
            step_up,
            resource: Some(resource.to_string()),
        };
        repo.insert_pending(
            &state_hash(&csrf),
            &PendingFlow {
                user: user.clone(),
                server: server.id,
                flow: serde_json::to_string(&flow).map_err(|e| Error::Unexpected(e.into()))?,
                authorization_url: authorization_url.clone(),
                expires_at,
            },
        )
        .await?;
        Ok(AuthorizationStart {
            authorization_url,
            expires_at,
        })
    }

    /// The authorization server's metadata, and the identity it was verified under: the
    /// issuer, when the metadata came from one of that issuer's own well-known URLs (RFC
    /// 8414 section 3.3, checked by rmcp for every form), else the MCP server's origin.
    /// Registrations are kept under this identity, so what one user's server claims can
    /// never choose the client another user's authorization uses.
    ///
    /// 2025-03-26 servers publish no resource metadata: the authorization server is the
    /// MCP server's own origin (its "authorization base URL"), and that revision never
    /// asks a client to compare the issuer its metadata names. Such metadata, found at the
    /// origin's root and naming another issuer, is accepted under the origin's identity;
    /// the issuer it names is only what an `iss` in the callback must match.
    async fn discover(
        &self,
        manager: &AuthorizationManager,
        resource: &Url,
        challenge: Option<&str>,
    ) -> Result<(AuthorizationMetadata, String), OAuthError> {
        let origin = resource.origin().ascii_serialization();
        let discovery =
            |e: &dyn std::fmt::Display| OAuthError::Discovery(crate::mcp::excerpt(&e.to_string()));
        match manager.resolve_metadata_from_challenge(challenge).await {
            Ok(resolution) => {
                let mut metadata = resolution.metadata;
                if resolution.source == AuthorizationMetadataSource::LegacyEndpointFallback {
                    // 2025-03-26 with no metadata at all: the MCP server's origin is the
                    // authorization server, so it is also the issuer an `iss` must name.
                    metadata.issuer.get_or_insert_with(|| origin.clone());
                    return Ok((metadata, origin));
                }
                let verified = metadata.issuer.clone().unwrap_or_else(|| origin.clone());
                Ok((metadata, verified))
            }
            Err(AuthError::AuthorizationServerMismatch {
                expected_issuer, ..
            }) if expected_issuer.trim_end_matches('/') == origin => {
                let url = format!("{origin}/.well-known/oauth-authorization-server");
                let response = self
                    .inner
                    .http
                    .request(reqwest::Method::GET, &url)
                    .map_err(|e| discovery(&e))?
                    .send()
                    .await
                    .map_err(|e| discovery(&crate::oauth::error_chain(&e.without_url())))?;
                if !response.status().is_success() {
                    return Err(discovery(&format!("{url} answered {}", response.status())));
                }
                let body = crate::oauth::read_capped(response)
                    .await
                    .map_err(|e| discovery(&e))?;
                let metadata = serde_json::from_slice::<AuthorizationMetadata>(&body)
                    .map_err(|e| discovery(&format!("unreadable metadata at {url}: {e}")))?;
                Ok((metadata, origin))
            }
            Err(error) => Err(discovery(&crate::oauth::error_chain(&error))),
        }
    }

    /// Every endpoint the metadata names passes the URL policy before anything is sent
    /// to it (the dialer would refuse the connection anyway; this says which endpoint), and
    /// the authorization endpoint, which a person will open, is `https` (or `http` on
    /// loopback where loopback is allowed).
    async fn check_endpoints(&self, metadata: &AuthorizationMetadata) -> Result<(), OAuthError> {
        let policy = self.inner.http.policy();
        let refused = |e: Error| OAuthError::EndpointRefused(e.to_string());
        policy
            .check_for_person(&metadata.authorization_endpoint, "authorization_endpoint")
            .map_err(refused)?;
        let named = [
            ("token_endpoint", Some(metadata.token_endpoint.as_str())),
            (
                "registration_endpoint",
                metadata.registration_endpoint.as_deref(),
            ),
            ("jwks_uri", metadata.jwks_uri.as_deref()),
            (
                "revocation_endpoint",
                metadata
                    .additional_fields
                    .get("revocation_endpoint")
                    .and_then(Value::as_str),
            ),
        ];
        for (field, url) in named {
            if let Some(url) = url {
                policy
                    .check_field(
                        url,
                        &format!("the authorization server's {field}"),
                        &["http", "https"],
                    )
                    .await
                    .map_err(refused)?;
            }
        }
        Ok(())
    }

    /// The client identity, in the spec's order: the server's pre-registered client, the
    /// service's client metadata document, a dynamic registration (kept and reused under
    /// `verified_as`, see [`Self::discover`]).
    async fn client_identity(
        &self,
        metadata: &AuthorizationMetadata,
        verified_as: &str,
        endpoint: &RemoteEndpoint,
    ) -> Result<ClientRecord, OAuthError> {
        let redirect_uri = self.redirect_uri();
        let record = |client_id: String, client_secret: Option<String>| ClientRecord {
            metadata: metadata.clone(),
            client_id,
            client_secret,
            redirect_uri: redirect_uri.clone(),
            verified_as: Some(verified_as.to_owned()),
        };
        if let Some(client_id) = &endpoint.oauth.client_id {
            return Ok(record(
                client_id.clone(),
                endpoint.oauth.client_secret.clone(),
            ));
        }
        let cimd = metadata
            .additional_fields
            .get("client_id_metadata_document_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if cimd {
            return Ok(record(self.client_metadata_url(), None));
        }
        let repo = self.inner.store.oauth();
        let issuer = verified_as;
        if let Some((client_id, secret)) = repo
            .registration(issuer, &redirect_uri)
            .await
            .map_err(server_error)?
        {
            return Ok(record(client_id, secret));
        }
        if metadata.registration_endpoint.is_none() {
            return Err(OAuthError::ClientRequired(
                "its metadata has no registration_endpoint".into(),
            ));
        }
        let (client_id, client_secret) = self.register(metadata, &redirect_uri).await?;
        repo.save_registration(issuer, &redirect_uri, &client_id, client_secret.as_deref())
            .await
            .map_err(server_error)?;
        Ok(record(client_id, client_secret))
    }

    /// Dynamic client registration (RFC 7591) as a confidential client where the
    /// authorization server allows it: the token endpoint authentication is the first of
    /// `client_secret_basic`, `client_secret_post`, `none` that its metadata lists
    /// (RFC 8414: `client_secret_basic` when it lists none). rmcp's own registration only
    /// registers public clients.
    async fn register(
        &self,
        metadata: &AuthorizationMetadata,
        redirect_uri: &str,
    ) -> Result<(String, Option<String>), OAuthError> {
        let endpoint = metadata.registration_endpoint.as_deref().ok_or_else(|| {
            OAuthError::ClientRequired("its metadata has no registration_endpoint".into())
        })?;
        let supported: Vec<&str> = metadata
            .additional_fields
            .get("token_endpoint_auth_methods_supported")
            .and_then(Value::as_array)
            .map(|methods| methods.iter().filter_map(Value::as_str).collect())
            .unwrap_or_else(|| vec!["client_secret_basic"]);
        let method = ["client_secret_basic", "client_secret_post", "none"]
            .into_iter()
            .find(|m| supported.contains(m))
            .unwrap_or("client_secret_basic");
        let request = json!({
            "client_name": self.inner.settings.oauth.client_name,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method,
        });
        // No `scope` (RFC 7591 makes it optional): the registration is shared by every
        // user of this authorization server, and the scopes come from one user's server,
        // which must not narrow what the others' authorizations may ask for.
        let unreachable = |why: String| {
            OAuthError::ClientRequired(crate::mcp::excerpt(&format!(
                "the registration endpoint could not be reached: {why}"
            )))
        };
        let response = self
            .inner
            .http
            .request(reqwest::Method::POST, endpoint)
            .map_err(|e| unreachable(e.to_string()))?
            .json(&request)
            .send()
            .await
            .map_err(|e| unreachable(crate::oauth::error_chain(&e.without_url())))?;
        let status = response.status();
        let body = crate::oauth::read_capped(response)
            .await
            .map_err(server_error)?;
        let body = String::from_utf8_lossy(&body);
        if !status.is_success() {
            return Err(OAuthError::ClientRequired(crate::mcp::excerpt(&format!(
                "registration answered {status}: {body}"
            ))));
        }
        #[derive(Deserialize)]
        struct Registered {
            client_id: String,
            client_secret: Option<String>,
        }
        let registered: Registered = serde_json::from_str(&body)
            .map_err(|e| server_error(format!("an unreadable registration: {e}")))?;
        Ok((
            registered.client_id,
            registered.client_secret.filter(|s| !s.is_empty()),
        ))
    }

    /// A server refused `user` for want of authorization: remember it, tell the user's
    /// event stream, and give the owner a URL to authorize with (a young one already
    /// handed out, or a new one).
    pub async fn required(
        &self,
        user: &UserId,
        server_id: Uuid,
        challenge: &AuthChallenge,
    ) -> Error {
        match self.required_inner(user, server_id, challenge).await {
            Ok(error) | Err(error) => error,
        }
    }

    async fn required_inner(
        &self,
        user: &UserId,
        server_id: Uuid,
        challenge: &AuthChallenge,
    ) -> Result<Error, Error> {
        let repo = self.inner.store.oauth();
        let Some(server) = self.inner.store.servers().get(user, server_id).await? else {
            return Ok(Error::Pool(crate::pool::PoolError::Upstream(
                McpError::AuthRequired(challenge.clone()),
            )));
        };
        repo.mark_required(user, server_id).await?;
        let ttl = chrono::Duration::seconds(self.inner.settings.oauth.state_ttl_secs as i64);
        let young = repo
            .newest_pending(user, server_id, Utc::now() + ttl / 2)
            .await?;
        let young = young.filter(|pending| {
            serde_json::from_str::<Flow>(&pending.flow)
                .is_ok_and(|flow| flow.step_up == challenge.insufficient_scope)
        });
        let start = match young {
            Some(pending) => AuthorizationStart {
                authorization_url: pending.authorization_url,
                expires_at: pending.expires_at,
            },
            None => {
                if challenge.insufficient_scope {
                    let attempts = repo.count_step_up(user, server_id).await?;
                    let max = self.inner.settings.oauth.max_step_ups;
                    if attempts > max as i32 {
                        return Ok(OAuthError::ScopeDenied {
                            scopes: challenge.scopes().join(" "),
                            attempts: max,
                        }
                        .into());
                    }
                }
                self.start(user, &server, Some(challenge)).await?
            }
        };
        self.inner.events.publish(
            user,
            "mcp.oauth.required",
            json!({
                "serverId": server_id,
                "serverName": server.spec.name.as_str(),
                "authorizationUrl": start.authorization_url,
                "expiresAt": start.expires_at,
                "insufficientScope": challenge.insufficient_scope,
            }),
        );
        Ok(Error::AuthRequired {
            server_id,
            authorization_url: Some(start.authorization_url),
            expires_at: Some(start.expires_at),
            insufficient_scope: challenge.insufficient_scope,
        })
    }

    /// `GET /oauth/callback`: completes the flow its `state` names. The state is the only
    /// credential: unknown, used, expired or foreign states are refused alike.
    pub async fn callback(&self, params: CallbackParams) -> CallbackOutcome {
        match self.complete(&params).await {
            Ok((user, server)) => {
                self.announce(&user, server, true, None);
                CallbackOutcome {
                    server: Some(server),
                    authorized: true,
                    message: "mcp-pool can now use this server for you.".into(),
                }
            }
            Err((target, error)) => {
                tracing::info!(code = error.code(), %error, "an OAuth callback failed");
                if let Some((user, server)) = &target {
                    self.announce(user, *server, false, Some(&error));
                }
                CallbackOutcome {
                    server: target.map(|(_, server)| server),
                    authorized: false,
                    message: error.to_string(),
                }
            }
        }
    }

    async fn complete(
        &self,
        params: &CallbackParams,
    ) -> Result<(UserId, Uuid), (Option<(UserId, Uuid)>, Error)> {
        let unknown = || (None, Error::from(OAuthError::UnknownState));
        let state = params.state.as_deref().ok_or_else(unknown)?;
        let repo = self.inner.store.oauth();
        let pending = repo
            .claim_pending(&state_hash(state), Utc::now())
            .await
            .map_err(|e| (None, e.into()))?
            .ok_or_else(unknown)?;
        let target = Some((pending.user.clone(), pending.server));
        let fail = |error: Error| (target.clone(), error);
        let flow: Flow =
            serde_json::from_str(&pending.flow).map_err(|e| fail(Error::Unexpected(e.into())))?;
        if let Some(error) = &params.error {
            let described = match &params.error_description {
                Some(description) => format!("{error}: {description}"),
                None => error.clone(),
            };
            return Err(fail(server_error(described).into()));
        }
        let code = params
            .code
            .as_deref()
            .ok_or_else(|| fail(server_error("the callback carries no code").into()))?;
        let server = self
            .inner
            .store
            .servers()
            .get(&pending.user, pending.server)
            .await
            .map_err(|e| fail(e.into()))?
            .ok_or_else(|| fail(OAuthError::UnknownState.into()))?;
        let endpoint = server
            .spec
            .transport
            .remote()
            .ok_or_else(|| fail(OAuthError::NotRemote.into()))?;
        // A server moved to another URL since the flow began: tokens for the old one must
        // never be kept for it.
        let moved = |now: &McpServer| {
            flow.resource.as_deref().is_some_and(|resource| {
                resource_of(&now.spec).is_none_or(|now| now.as_str() != resource)
            })
        };
        if moved(&server) {
            return Err(fail(OAuthError::UnknownState.into()));
        }
        let mut manager = self
            .manager(&resource_url(endpoint))
            .await
            .map_err(|e| fail(e.into()))?;
        manager.set_metadata(flow.client.metadata.clone());
        manager
            .configure_client(flow.client.config())
            .map_err(|e| fail(server_error(e).into()))?;
        manager.set_state_store(CapturedState::with(state.to_owned(), flow.state));
        let obtained = InMemoryCredentialStore::new();
        manager.set_credential_store(obtained.clone());
        manager
            .exchange_code_for_token_with_issuer(code, state, params.iss.as_deref())
            .await
            .map_err(|e| fail(server_error(e).into()))?;
        let credentials = obtained
            .load()
            .await
            .ok()
            .flatten()
            .ok_or_else(|| fail(server_error("no tokens were issued").into()))?;
        let still = self
            .inner
            .store
            .servers()
            .get(&pending.user, pending.server)
            .await
            .map_err(|e| fail(e.into()))?;
        if still.as_ref().is_none_or(moved) {
            return Err(fail(OAuthError::UnknownState.into()));
        }
        self.save_grant(&pending.user, pending.server, &credentials, &flow.client)
            .await
            .map_err(fail)?;
        self.restart(&pending.user, pending.server).await;
        Ok((pending.user, pending.server))
    }

    async fn save_grant(
        &self,
        user: &UserId,
        server: Uuid,
        credentials: &StoredCredentials,
        client: &ClientRecord,
    ) -> Result<()> {
        let credentials_json =
            serde_json::to_string(credentials).map_err(|e| Error::Unexpected(e.into()))?;
        let client_json = serde_json::to_string(client).map_err(|e| Error::Unexpected(e.into()))?;
        let scopes = crate::oauth::granted_scopes(credentials);
        self.inner
            .store
            .oauth()
            .save_grant(
                user,
                server,
                Grant {
                    credentials: &credentials_json,
                    client: Some(&client_json),
                    issuer: client
                        .verified_as
                        .as_deref()
                        .or(credentials.issuer.as_deref())
                        .or(client.metadata.issuer.as_deref()),
                    scopes: &scopes,
                    expires_at: crate::oauth::expires_at(credentials),
                },
            )
            .await?;
        Ok(())
    }

    /// Connections to the server, here and on other instances, start again with the
    /// new tokens (or without the forgotten ones).
    async fn restart(&self, user: &UserId, server: Uuid) {
        self.inner.pool.stop_server(user, server).await;
        self.inner.cluster.tell(Note::ServerChanged {
            user: user.to_string(),
            server,
        });
    }

    /// `mcp.oauth.completed` on the user's event streams, here and on other instances.
    fn announce(&self, user: &UserId, server: Uuid, authorized: bool, error: Option<&Error>) {
        let data = json!({
            "serverId": server,
            "status": if authorized { "authorized" } else { "failed" },
            "error": error.map(Error::summary),
        });
        self.inner
            .events
            .publish(user, "mcp.oauth.completed", data.clone());
        self.inner.cluster.tell(Note::UserEvent {
            user: user.to_string(),
            name: "mcp.oauth.completed".into(),
            data,
        });
    }

    /// `GET /api/mcp-servers/{id}/oauth`.
    pub async fn status(&self, user: &UserId, server_id: &str) -> Result<StatusReport> {
        let server = self.server(user, server_id).await?;
        let record = self.inner.store.oauth().token(user, server.id).await?;
        Ok(report(record))
    }

    /// `DELETE /api/mcp-servers/{id}/oauth`: forgets the tokens (revoking them where the
    /// authorization server offers revocation); the next use asks for authorization.
    pub async fn forget(&self, user: &UserId, server_id: &str) -> Result<()> {
        let server = self.server(user, server_id).await?;
        let before = self.inner.store.oauth().forget(user, server.id).await?;
        self.restart(user, server.id).await;
        if let Some(record) = before {
            self.revoke(record).await;
        }
        Ok(())
    }

    /// The server was deleted: its tokens are revoked and forgotten.
    pub async fn server_deleted(&self, user: &UserId, server: Uuid) -> Result<()> {
        if let Some(record) = self.inner.store.oauth().delete_server(user, server).await? {
            self.revoke(record).await;
        }
        Ok(())
    }

    /// RFC 7009, refresh token first (it revokes the grant at most servers); failures are
    /// logged: the tokens are forgotten here either way.
    async fn revoke(&self, record: TokenRecord) {
        let (Some(credentials), Some(client)) = (record.credentials, record.client) else {
            return;
        };
        let (Ok(credentials), Ok(client)) = (
            serde_json::from_str::<StoredCredentials>(&credentials),
            serde_json::from_str::<ClientRecord>(&client),
        ) else {
            return;
        };
        let Some(endpoint) = client
            .metadata
            .additional_fields
            .get("revocation_endpoint")
            .and_then(Value::as_str)
        else {
            return;
        };
        let Some(tokens) = credentials.token_response else {
            return;
        };
        use oauth2::TokenResponse as _;
        let mut to_revoke = Vec::new();
        if let Some(refresh) = tokens.refresh_token() {
            to_revoke.push((refresh.secret().clone(), "refresh_token"));
        }
        to_revoke.push((tokens.access_token().secret().clone(), "access_token"));
        let post_auth = client
            .metadata
            .additional_fields
            .get("revocation_endpoint_auth_methods_supported")
            .or_else(|| {
                client
                    .metadata
                    .additional_fields
                    .get("token_endpoint_auth_methods_supported")
            })
            .and_then(Value::as_array)
            .is_some_and(|methods| {
                let has = |m: &str| methods.iter().any(|v| v.as_str() == Some(m));
                has("client_secret_post") && !has("client_secret_basic")
            });
        for (token, hint) in to_revoke {
            let mut form = vec![("token", token), ("token_type_hint", hint.to_owned())];
            // Metadata kept before the policy judged every endpoint is judged here too.
            let mut request = match self.inner.http.request(reqwest::Method::POST, endpoint) {
                Ok(request) => request,
                Err(refused) => {
                    tracing::warn!(%refused, "token revocation not sent");
                    return;
                }
            };
            match &client.client_secret {
                Some(secret) if !post_auth => {
                    request = request.basic_auth(
                        form_urlencode(&client.client_id),
                        Some(form_urlencode(secret)),
                    );
                }
                Some(secret) => {
                    form.push(("client_id", client.client_id.clone()));
                    form.push(("client_secret", secret.clone()));
                }
                None => form.push(("client_id", client.client_id.clone())),
            }
            match request.form(&form).send().await {
                Ok(response) if response.status().is_success() => {}
                Ok(response) => {
                    tracing::warn!(status = %response.status(), "token revocation was refused")
                }
                Err(e) => tracing::warn!(error = %e.without_url(), "token revocation failed"),
            }
        }
    }

    /// What a connection of `server` uses to get its user's tokens.
    pub fn connector(&self, server: &McpServer) -> Option<Arc<dyn UpstreamAuth>> {
        let endpoint = server.spec.transport.remote()?;
        Some(Arc::new(Connector {
            service: Arc::downgrade(&self.inner),
            user: server.user_id.clone(),
            server: server.id,
            resource: resource_url(endpoint),
        }))
    }
}

/// RFC 6749 §2.3.1: client credentials are form-encoded before HTTP Basic.
fn form_urlencode(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

fn report(record: Option<TokenRecord>) -> StatusReport {
    let Some(record) = record else {
        return StatusReport {
            status: OAuthStatus::NotRequired,
            issuer: None,
            scopes: Vec::new(),
            expires_at: None,
        };
    };
    let refreshable = record
        .credentials
        .as_deref()
        .and_then(|json| serde_json::from_str::<StoredCredentials>(json).ok())
        .and_then(|c| c.token_response)
        .is_some_and(|t| {
            use oauth2::TokenResponse as _;
            t.refresh_token().is_some()
        });
    let status = match (&record.credentials, record.expires_at) {
        (None, _) => OAuthStatus::Required,
        (Some(_), Some(expires)) if expires <= Utc::now() && !refreshable => OAuthStatus::Expired,
        (Some(_), _) => OAuthStatus::Authorized,
    };
    let granted = status != OAuthStatus::Required;
    StatusReport {
        status,
        issuer: record.issuer.filter(|_| granted),
        scopes: record.scopes,
        expires_at: record.expires_at,
    }
}

/// One (user, server)'s tokens for its connections.
struct Connector {
    /// Weak: the service holds the pool, whose live connections hold this; a strong
    /// reference would keep the service (and its database pool) alive forever once
    /// its runtime ended.
    service: Weak<Inner>,
    user: UserId,
    server: Uuid,
    resource: Url,
}

impl UpstreamAuth for Connector {
    fn manager(
        &self,
    ) -> futures::future::BoxFuture<'_, Result<Option<AuthorizationManager>, McpError>> {
        Box::pin(async move {
            let Some(inner) = self.service.upgrade() else {
                return Err(McpError::Connect("the service is stopping".into()));
            };
            let service = OAuthService { inner };
            let inner = &service.inner;
            let repo = inner.store.oauth();
            let record = repo
                .token(&self.user, self.server)
                .await
                .map_err(|e| McpError::Connect(format!("cannot read the OAuth tokens: {e}")))?;
            let Some(TokenRecord {
                credentials: Some(_),
                client: Some(client),
                ..
            }) = record
            else {
                return Ok(None);
            };
            let client: ClientRecord = serde_json::from_str(&client)
                .map_err(|e| McpError::Connect(format!("unreadable OAuth client: {e}")))?;
            let mut manager = service
                .manager(&self.resource)
                .await
                .map_err(|e| McpError::Connect(e.to_string()))?;
            manager.set_metadata(client.metadata.clone());
            manager
                .configure_client(client.config())
                .map_err(|e| McpError::Connect(format!("OAuth client: {e}")))?;
            manager.set_credential_store(TokenStore {
                repo,
                user: self.user.clone(),
                server: self.server,
                holder: inner.holder.clone(),
            });
            Ok(Some(manager))
        })
    }
}
