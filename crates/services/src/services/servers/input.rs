//! What a user sends to create or update a server, and the OAuth client part of it: one
//! optional-field shape for both, so an update keeps whatever it leaves out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::{MASK, OAuthClientSettings, RootEntry, SamplingSettings};
use crate::error::{Error, Result};

/// Fields a user may send when creating or updating a server. Every field is optional so
/// the same shape serves both: on update, an absent (or null) field keeps its value.
// No `Debug`: the URL, headers and env are in clear here.
#[derive(Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerInput {
    /// Unique per user, 1 to 64 characters; required on create.
    #[schema(min_length = 1, max_length = 64)]
    pub name: Option<String>,
    /// `stdio`, `sse`, `streamableHttp` or `embedded`; inferred from the URL when omitted.
    #[serde(rename = "type")]
    #[schema(pattern = "^(stdio|sse|streamableHttp|embedded)$")]
    pub transport: Option<String>,
    pub is_active: Option<bool>,
    /// `********` as the user name, the password or a query value keeps the stored one
    /// (same scheme, host and port only).
    #[serde(alias = "url")]
    pub base_url: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    /// The OAuth client for a server whose authorization server offers neither a client
    /// metadata document nor dynamic registration, and the scopes to ask for.
    pub oauth: Option<OAuthInput>,
    #[serde(alias = "timeout")]
    pub timeout_secs: Option<u32>,
    pub preset: Option<String>,
    pub preset_args: Option<BTreeMap<String, String>>,
    /// Only accepted when it equals what the preset resolves to (GET -> PUT round trips).
    pub command: Option<String>,
    /// Only accepted when it equals what the preset resolves to (GET -> PUT round trips).
    pub args: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub disabled_tools: Option<Vec<String>>,
    pub auto_approve_tools: Option<Vec<String>>,
    /// Which embedded server (`clock`, `calculator`) for type `embedded`.
    pub embedded: Option<String>,
    /// What becomes of the server's sampling requests in REST, chat and gRPC calls:
    /// `{"policy": "deny"}` (the default), or `ask` / `auto` with a configured
    /// `provider` and `model` to run them on.
    pub sampling: Option<SamplingSettings>,
    /// The roots `roots/list` answers when no gateway client answers it (`file://` URIs).
    pub roots: Option<Vec<RootEntry>>,
    /// `user` (one upstream session for all the user's callers, the default) or
    /// `conversation` (one per chat conversation and gateway session: stateful servers).
    #[schema(pattern = "^(user|conversation)$")]
    pub session_scope: Option<String>,
    /// The catalog entry to make the server from (`GET /api/catalog`), e.g.
    /// `io.github.modelcontextprotocol/filesystem`; its transport then comes from the entry.
    pub catalog: Option<String>,
    /// A version of the entry to stay on; absent follows the entry's current version.
    pub catalog_version: Option<String>,
    /// Values for the entry's inputs, by field name (`fields` of the catalog entry).
    /// A secret sent as `********` keeps the stored one; on update, the whole set is replaced.
    pub values: Option<BTreeMap<String, String>>,
}

/// A server's OAuth client as the API shows and takes it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuthInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// `********` keeps the stored secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl OAuthInput {
    pub fn masked(settings: &OAuthClientSettings) -> Self {
        Self {
            client_id: settings.client_id.clone(),
            client_secret: settings.client_secret.as_ref().map(|_| MASK.to_owned()),
            scopes: settings.scopes.clone(),
        }
    }

    /// Validated settings; a masked secret keeps `current`'s.
    pub(super) fn apply(self, current: &OAuthClientSettings) -> Result<OAuthClientSettings> {
        let clean = |field: &str, value: Option<String>| -> Result<Option<String>> {
            match value.map(|v| v.trim().to_owned()) {
                Some(v) if v.is_empty() => Ok(None),
                Some(v) if v.len() > 2048 || v.chars().any(char::is_control) => {
                    Err(Error::validation(format!(
                        "oauth.{field} must be 1 to 2048 printable characters"
                    )))
                }
                other => Ok(other),
            }
        };
        let client_secret = match self.client_secret.as_deref() {
            Some(MASK) => current.client_secret.clone(),
            _ => clean("clientSecret", self.client_secret)?,
        };
        let client_id = clean("clientId", self.client_id)?;
        if client_secret.is_some() && client_id.is_none() {
            return Err(Error::validation("oauth.clientSecret needs oauth.clientId"));
        }
        if self.scopes.len() > 32
            || self.scopes.iter().any(|s| {
                s.is_empty()
                    || s.len() > 256
                    || s.chars().any(|c| c.is_whitespace() || c.is_control())
            })
        {
            return Err(Error::validation(
                "oauth.scopes must be at most 32 scope tokens without spaces",
            ));
        }
        Ok(OAuthClientSettings {
            client_id,
            client_secret,
            scopes: self.scopes,
        })
    }
}
