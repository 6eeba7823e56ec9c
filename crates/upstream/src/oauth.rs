//! Per-user OAuth 2.1 to remote MCP servers: the pieces rmcp's `AuthorizationManager`
//! (discovery, registration, PKCE, token exchange and refresh) is plugged into here.
//!
//! - [`PolicyHttp`]: every request of the OAuth machinery (metadata, registration, token,
//!   revocation) dials through the URL policy, like server connections do.
//! - where a (user, server)'s tokens are kept is rmcp's `CredentialStore`: the services
//!   implement it on the database (`services::oauth`'s `TokenStore`).
//! - [`CapturedState`]: the PKCE state of a new authorization, kept by the service in
//!   `oauth_pending` with the rest of the flow (the callback may reach another instance).
//!
//! The flows themselves (start, callback, forget) are `services::oauth`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rmcp::transport::auth::{
    AuthError, OAuthHttpClient, OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest,
    StateStore, StoredAuthorizationState, StoredCredentials,
};

/// Largest answer of an authorization server read (metadata, token, registration).
const MAX_OAUTH_BODY: usize = 1024 * 1024;

/// Failures of an authorization flow, as its user sees them.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    #[error("only sse and streamableHttp servers use OAuth")]
    NotRemote,
    #[error("OAuth discovery failed: {0}")]
    Discovery(String),
    /// Neither a client metadata document nor dynamic registration is offered.
    #[error(
        "the authorization server offers no dynamic client registration; set oauth.clientId (and oauth.clientSecret) on the server: {0}"
    )]
    ClientRequired(String),
    #[error("the authorization server refused: {0}")]
    AuthorizationServer(String),
    /// The metadata names an endpoint the URL policy forbids, or an authorization URL no
    /// person should be sent to.
    #[error("the authorization server's metadata was refused: {0}")]
    EndpointRefused(String),
    /// Step-up authorizations in a row reached `oauth.max_step_ups`.
    #[error(
        "the MCP server still asks for more scopes ({scopes}) after {attempts} step-up authorizations; giving up"
    )]
    ScopeDenied { scopes: String, attempts: u32 },
    /// The callback's state is unknown, used, expired or foreign.
    #[error("this authorization link is unknown, already used or expired; start again")]
    UnknownState,
}

impl OAuthError {
    pub fn code(&self) -> &'static str {
        match self {
            OAuthError::NotRemote => "OAUTH_NOT_APPLICABLE",
            OAuthError::Discovery(_) => "OAUTH_DISCOVERY_FAILED",
            OAuthError::ClientRequired(_) => "OAUTH_CLIENT_REQUIRED",
            OAuthError::AuthorizationServer(_) => "OAUTH_SERVER_ERROR",
            OAuthError::EndpointRefused(_) => "OAUTH_METADATA_REFUSED",
            OAuthError::ScopeDenied { .. } => "MCP_AUTH_SCOPE_DENIED",
            OAuthError::UnknownState => "OAUTH_STATE_INVALID",
        }
    }
}

/// rmcp's OAuth HTTP client, on clients that dial only what the URL policy allows.
pub struct PolicyHttp {
    follow: reqwest::Client,
    stop: reqwest::Client,
    policy: Arc<crate::security::UrlPolicy>,
}

impl PolicyHttp {
    /// On `http`'s dialer (its TLS configuration, an operator's extra CA included).
    pub fn new(http: &crate::mcp::UpstreamHttp, timeout: Duration) -> Self {
        let dialer = http.dialer();
        Self {
            // Every hop of a redirect is dialled under the policy too.
            follow: dialer.client(crate::security::Redirects::UpTo(5), Some(timeout)),
            stop: dialer.client(crate::security::Redirects::Never, Some(timeout)),
            policy: dialer.policy().clone(),
        }
    }

    /// The URL policy both clients dial under.
    pub fn policy(&self) -> &Arc<crate::security::UrlPolicy> {
        &self.policy
    }

    /// An IP-literal host judged before anything is dialled (names are judged by the
    /// resolver; the dialer checks every connection's address either way). Every request
    /// of the OAuth machinery, rmcp's and the service's own, passes here first.
    pub fn judge(&self, url: &str) -> Result<(), crate::security::url_guard::AddressRefused> {
        match url::Url::parse(url)
            .ok()
            .as_ref()
            .and_then(crate::security::url_guard::literal_host)
        {
            Some(ip) => self.policy.admits(ip),
            None => Ok(()),
        }
    }

    /// A request of the service's own (probe, registration, revocation) on the
    /// no-redirect client, once [`Self::judge`] let its URL through.
    pub fn request(
        &self,
        method: reqwest::Method,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, crate::security::url_guard::AddressRefused> {
        self.judge(url)?;
        Ok(self.stop.request(method, url))
    }
}

impl OAuthHttpClient for PolicyHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let (parts, body) = request.request.into_parts();
            self.judge(&parts.uri.to_string())?;
            let mut builder = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body);
            if let Some(timeout) = request.timeout {
                builder = builder.timeout(timeout);
            }
            let response = builder
                .send()
                .await
                .map_err(|e| Box::new(e.without_url()))?;
            let mut answer = http::Response::builder().status(response.status());
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            let bytes = read_capped(response).await?;
            Ok(answer.body(bytes)?)
        })
    }
}

/// An authorization server's answer, read up to [`MAX_OAUTH_BODY`]: a larger one is
/// refused as soon as it is seen to be larger, not held.
pub async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let too_large = || format!("the authorization server's answer exceeds {MAX_OAUTH_BODY} bytes");
    if response
        .content_length()
        .is_some_and(|length| length > MAX_OAUTH_BODY as u64)
    {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| e.without_url().to_string())?
    {
        if bytes.len() + chunk.len() > MAX_OAUTH_BODY {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// When the access token of `credentials` expires, if it says.
pub fn expires_at(credentials: &StoredCredentials) -> Option<DateTime<Utc>> {
    use oauth2::TokenResponse as _;
    let expires_in = credentials.token_response.as_ref()?.expires_in()?;
    let received = credentials.token_received_at?;
    DateTime::from_timestamp((received + expires_in.as_secs()) as i64, 0)
}

/// The scopes granted, without the empty one some servers' `"scope": ""` parses to.
pub fn granted_scopes(credentials: &StoredCredentials) -> Vec<String> {
    credentials
        .granted_scopes
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect()
}

/// Catches the state rmcp makes for a new authorization (and hands it back at the
/// callback), so the service can keep it with the rest of the flow.
#[derive(Clone, Default)]
pub struct CapturedState(Arc<Mutex<Option<(String, StoredAuthorizationState)>>>);

impl CapturedState {
    pub fn with(csrf: String, state: StoredAuthorizationState) -> Self {
        Self(Arc::new(Mutex::new(Some((csrf, state)))))
    }

    pub fn take(&self) -> Option<(String, StoredAuthorizationState)> {
        self.0.lock().expect("state lock").take()
    }
}

#[async_trait]
impl StateStore for CapturedState {
    async fn save(&self, csrf: &str, state: StoredAuthorizationState) -> Result<(), AuthError> {
        *self.0.lock().expect("state lock") = Some((csrf.to_owned(), state));
        Ok(())
    }

    async fn load(&self, csrf: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        Ok(self
            .0
            .lock()
            .expect("state lock")
            .as_ref()
            .filter(|(saved, _)| saved == csrf)
            .map(|(_, state)| state.clone()))
    }

    async fn delete(&self, csrf: &str) -> Result<(), AuthError> {
        let mut slot = self.0.lock().expect("state lock");
        if slot.as_ref().is_some_and(|(saved, _)| saved == csrf) {
            *slot = None;
        }
        Ok(())
    }
}
