//! Which client this service is to an authorization server: pre-registered, its client
//! metadata document, or a dynamic registration kept per verified issuer.

use rmcp::transport::auth::{AuthorizationMetadata, OAuthClientConfig};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{OAuthService, server_error};
use crate::domain::RemoteEndpoint;
use crate::error::Result;
use crate::oauth::OAuthError;

/// The client and authorization server metadata a grant belongs to: what refreshing and
/// revoking need, without a new discovery.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct ClientRecord {
    pub(super) metadata: AuthorizationMetadata,
    pub(super) client_id: String,
    pub(super) client_secret: Option<String>,
    redirect_uri: String,
    /// The identity the metadata was verified under (see `OAuthService::discover`): what
    /// the grant names as its issuer, whatever the metadata claims. Absent in records kept
    /// before it existed.
    #[serde(default)]
    pub(super) verified_as: Option<String>,
    /// The `resource` the authorization request named (RFC 8707: the server's protected
    /// resource metadata's, which may differ from its URL, e.g. without its path); the
    /// token and refresh requests name the same. Absent in records kept before it existed
    /// (those requests then name the server's URL, as they did).
    #[serde(default)]
    pub(super) resource: Option<String>,
}

/// What kind of client this service is (SEP-837, OpenID Connect Dynamic Client
/// Registration §2): a web application, whose redirect URI is its own public URL and whose
/// secrets stay on the server; not an app on the user's device ("native").
const APPLICATION_TYPE: &str = "web";

impl ClientRecord {
    /// A manager for this client's token requests: its metadata, identity and resource.
    pub(super) async fn configure(
        &self,
        manager: &mut rmcp::transport::auth::AuthorizationManager,
    ) -> Result<(), rmcp::transport::auth::AuthError> {
        manager.set_metadata(self.metadata.clone());
        if let Some(resource) = &self.resource {
            manager.set_resource(resource.clone()).await;
        }
        manager.configure_client(self.config())
    }

    pub(super) fn config(&self) -> OAuthClientConfig {
        let config = OAuthClientConfig::new(&self.client_id, &self.redirect_uri);
        match &self.client_secret {
            Some(secret) => config.with_client_secret(secret),
            None => config,
        }
    }
}

impl OAuthService {
    pub(crate) fn client_metadata_url(&self) -> String {
        format!("{}/oauth/client-metadata.json", self.public_url())
    }

    /// The Client ID Metadata Document this service publishes (its URL is its client id).
    pub fn client_metadata(&self) -> Value {
        json!({
            "client_id": self.client_metadata_url(),
            "client_name": self.inner.settings.oauth.client_name,
            "application_type": APPLICATION_TYPE,
            "redirect_uris": [self.redirect_uri()],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })
    }

    /// The client identity, in the spec's order: the server's pre-registered client, the
    /// service's client metadata document, a dynamic registration (kept and reused under
    /// `verified_as`, see [`Self::discover`]).
    pub(super) async fn client_identity(
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
            resource: None,
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
            "application_type": APPLICATION_TYPE,
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
            .map_err(|e| unreachable(crate::mcp::error_chain(&e.without_url())))?;
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
}
