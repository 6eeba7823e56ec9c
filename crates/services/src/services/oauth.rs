//! Per-user OAuth of remote MCP servers (the MCP authorization spec): starting an
//! authorization, completing it at the callback, reading and forgetting it, and handing
//! each connection its user's tokens.
//!
//! Discovery, registration, PKCE, the token exchange and refreshes are rmcp's
//! `AuthorizationManager`; this service decides which client identity to use, keeps the
//! flow in the database between the start and the callback (which may reach another
//! instance), and stores the tokens per (user, server), sealed.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rmcp::transport::auth::{
    AuthorizationManager, CredentialStore, InMemoryCredentialStore, OAuthHttpClient,
    StoredAuthorizationState,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use url::Url;
use uuid::Uuid;

mod client;
mod discovery;
mod grant;
mod tokens;

pub use discovery::resource_of;
pub use grant::{OAuthStatus, StatusReport};

use client::ClientRecord;
use discovery::resource_url;

use crate::cluster::{Cluster, Note};
use crate::config::Settings;
use crate::domain::{McpServer, UserId};
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::mcp::McpError;
use crate::mcp::auth::AuthChallenge;
use crate::oauth::{CapturedState, OAuthError, PolicyHttp};
use crate::pool::Pool;
use crate::store::{PendingFlow, Store};

/// What a new authorization gives its user: the URL to open, valid until `expires_at`.
#[derive(Debug, Clone)]
pub struct AuthorizationStart {
    pub authorization_url: String,
    pub expires_at: DateTime<Utc>,
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

    async fn server(&self, user: &UserId, server_id: &str) -> Result<McpServer> {
        let id = Uuid::parse_str(server_id)
            .map_err(|_| Error::NotFound(Resource::McpServer, server_id.to_owned()))?;
        self.inner
            .store
            .servers()
            .usable(user, id)
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
        let mut client = self
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
        // The resource the request named (the metadata's, where discovery found one):
        // the token requests of this grant name the same.
        client.resource = Some(manager.resource().await);
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
        let Some(server) = self.inner.store.servers().usable(user, server_id).await? else {
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
            .usable(&pending.user, pending.server)
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
        flow.client
            .configure(&mut manager)
            .await
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
            .usable(&pending.user, pending.server)
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
    /// A team server's owner forgets (and revokes) every member's tokens for it.
    pub(crate) async fn server_deleted(&self, user: &UserId, server: Uuid) -> Result<()> {
        let repo = self.inner.store.oauth();
        let records = if user.team_group().is_some() {
            repo.delete_server_for_everyone(server).await?
        } else {
            repo.delete_server(user, server)
                .await?
                .into_iter()
                .collect()
        };
        for record in records {
            self.revoke(record).await;
        }
        Ok(())
    }
}
