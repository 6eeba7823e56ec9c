//! Finding the authorization server and verifying its metadata: which identity it is
//! trusted under decides whose registrations a flow may reuse, so it is kept on its own.

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationMetadataSource,
};
use serde_json::{Value, json};
use url::Url;

use super::OAuthService;
use crate::domain::RemoteEndpoint;
use crate::error::Result;
use crate::invalid::InvalidInput;
use crate::oauth::OAuthError;

/// The resource (origin and path) a server's tokens are bound to; None for a local server.
pub fn resource_of(spec: &crate::domain::ServerSpec) -> Option<Url> {
    spec.transport.remote().map(resource_url)
}

/// The server's URL as the OAuth resource (RFC 8707): without credentials, query or
/// fragment.
pub(super) fn resource_url(endpoint: &RemoteEndpoint) -> Url {
    let mut url = endpoint.url.expose().clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url
}

impl OAuthService {
    /// Asks the server without a token for its challenge (what discovery starts from).
    pub(super) async fn probe(
        &self,
        endpoint: &RemoteEndpoint,
        streamable: bool,
    ) -> Option<String> {
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
    pub(super) async fn discover(
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
                    .map_err(|e| discovery(&crate::mcp::error_chain(&e.without_url())))?;
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
            Err(error) => Err(discovery(&crate::mcp::error_chain(&error))),
        }
    }

    /// Every endpoint the metadata names passes the URL policy before anything is sent
    /// to it (the dialer would refuse the connection anyway; this says which endpoint), and
    /// the authorization endpoint, which a person will open, is `https` (or `http` on
    /// loopback where loopback is allowed).
    pub(super) async fn check_endpoints(
        &self,
        metadata: &AuthorizationMetadata,
    ) -> Result<(), OAuthError> {
        let policy = self.inner.http.policy();
        let refused = |e: InvalidInput| OAuthError::EndpointRefused(e.to_string());
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
}
