//! A grant once a callback has saved it: reported, handed to each connection, revoked.
//! Apart from the flows, which only ever produce one.

use std::sync::{Arc, Weak};

use chrono::{DateTime, Utc};
use rmcp::transport::auth::{AuthorizationManager, StoredCredentials};
use serde_json::Value;
use url::Url;
use uuid::Uuid;

use super::client::ClientRecord;
use super::discovery::resource_url;
use super::tokens::TokenStore;
use super::{Inner, OAuthService};
use crate::domain::{McpServer, UserId};
use crate::error::{Error, Result};
use crate::mcp::McpError;
use crate::mcp::auth::UpstreamAuth;
use crate::store::{Grant, TokenRecord};

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

impl OAuthService {
    pub(super) async fn save_grant(
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

    /// `GET /api/mcp-servers/{id}/oauth`.
    pub async fn status(&self, user: &UserId, server_id: &str) -> Result<StatusReport> {
        let server = self.server(user, server_id).await?;
        let record = self.inner.store.oauth().token(user, server.id).await?;
        Ok(report(record))
    }

    /// RFC 7009, refresh token first (it revokes the grant at most servers); failures are
    /// logged: the tokens are forgotten here either way.
    pub(super) async fn revoke(&self, record: TokenRecord) {
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
            client
                .configure(&mut manager)
                .await
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
