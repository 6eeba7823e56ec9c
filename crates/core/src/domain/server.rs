//! A user's MCP server definition. The transport enum carries exactly the fields its kind
//! needs, so a stdio server with a URL (or a remote one with a command) cannot exist.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use url::Url;
use uuid::Uuid;

use super::{SecretMap, SecretUrl, ServerName, UserId};
use crate::invalid::InvalidInput;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    Stdio,
    /// The legacy HTTP+SSE transport (2024-11-05 spec).
    Sse,
    StreamableHttp,
    /// Tools that run inside the service.
    Embedded,
}

/// The embedded servers this service carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmbeddedKind {
    Clock,
    Calculator,
}

impl EmbeddedKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EmbeddedKind::Clock => "clock",
            EmbeddedKind::Calculator => "calculator",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        match raw {
            "clock" => Ok(EmbeddedKind::Clock),
            "calculator" => Ok(EmbeddedKind::Calculator),
            other => Err(InvalidInput::value(format!(
                "embedded '{other}' is not one of clock, calculator"
            ))),
        }
    }
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::Sse => "sse",
            TransportKind::StreamableHttp => "streamableHttp",
            TransportKind::Embedded => "embedded",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        match raw {
            "stdio" => Ok(TransportKind::Stdio),
            "sse" => Ok(TransportKind::Sse),
            "streamableHttp" => Ok(TransportKind::StreamableHttp),
            "embedded" => Ok(TransportKind::Embedded),
            other => Err(InvalidInput::value(format!(
                "type '{other}' is not one of stdio, sse, streamableHttp, embedded"
            ))),
        }
    }

    /// Seed 001's rule when the type is omitted for a URL: a path ending in `/mcp` is
    /// streamable HTTP, anything else the legacy SSE transport.
    pub fn infer_from_url(url: &Url) -> Self {
        if url.path().trim_end_matches('/').ends_with("/mcp") {
            TransportKind::StreamableHttp
        } else {
            TransportKind::Sse
        }
    }

    pub fn is_remote(self) -> bool {
        matches!(self, TransportKind::Sse | TransportKind::StreamableHttp)
    }
}

/// How a stdio server is started: always from an admin preset plus the user's slot values.
#[derive(Debug, Clone, PartialEq)]
pub struct StdioLaunch {
    pub preset: String,
    pub preset_args: BTreeMap<String, String>,
    /// The user's env slot values (secret).
    pub env: SecretMap,
    /// The command and arguments the preset resolved to when the server was saved; shown to
    /// the user. The pool resolves the preset again at connect time.
    pub command: String,
    pub args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RemoteEndpoint {
    /// Its user name, password and query values are secrets, like the headers.
    pub url: SecretUrl,
    pub headers: SecretMap,
    /// The OAuth client to use when the server asks for authorization; unset means the
    /// service's client metadata document or dynamic registration.
    pub oauth: OAuthClientSettings,
}

/// A server's OAuth client as its user or the admin configured it: a pre-registered client
/// (when the authorization server offers no registration) and the scopes to ask for.
#[derive(Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuthClientSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// A secret: sealed at rest, shown as [`super::MASK`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

impl OAuthClientSettings {
    pub fn is_empty(&self) -> bool {
        self.client_id.is_none() && self.client_secret.is_none() && self.scopes.is_empty()
    }
}

impl std::fmt::Debug for OAuthClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClientSettings")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| super::MASK),
            )
            .field("scopes", &self.scopes)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    Stdio(StdioLaunch),
    Sse(RemoteEndpoint),
    StreamableHttp(RemoteEndpoint),
    Embedded(EmbeddedKind),
}

impl Transport {
    pub fn kind(&self) -> TransportKind {
        match self {
            Transport::Stdio(_) => TransportKind::Stdio,
            Transport::Sse(_) => TransportKind::Sse,
            Transport::StreamableHttp(_) => TransportKind::StreamableHttp,
            Transport::Embedded(_) => TransportKind::Embedded,
        }
    }

    pub fn remote(&self) -> Option<&RemoteEndpoint> {
        match self {
            Transport::Sse(endpoint) | Transport::StreamableHttp(endpoint) => Some(endpoint),
            Transport::Stdio(_) | Transport::Embedded(_) => None,
        }
    }

    pub fn stdio(&self) -> Option<&StdioLaunch> {
        match self {
            Transport::Stdio(launch) => Some(launch),
            _ => None,
        }
    }

    /// Where the server is, for a person: its URL with credentials masked, its preset
    /// and command line, or the embedded server's name. Never a secret.
    pub fn describe(&self) -> String {
        match self {
            Transport::Sse(endpoint) | Transport::StreamableHttp(endpoint) => endpoint.url.masked(),
            Transport::Stdio(launch) => {
                let mut line = vec![launch.command.as_str()];
                line.extend(launch.args.iter().map(String::as_str));
                if launch.preset.contains('/') {
                    format!("{} (catalog {})", line.join(" "), launch.preset)
                } else {
                    format!("{} (preset {})", line.join(" "), launch.preset)
                }
            }
            Transport::Embedded(kind) => format!("embedded {}", kind.as_str()),
        }
    }
}

/// Everything a user decides about a server; validated before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub name: ServerName,
    pub transport: Transport,
    pub is_active: bool,
    /// Per-request timeout; `None` uses `pool.default_call_timeout_secs`.
    pub timeout_secs: Option<u32>,
    pub disabled_tools: Vec<String>,
    pub auto_approve_tools: Vec<String>,
    /// What becomes of the server's sampling requests outside the gateway.
    pub sampling: SamplingSettings,
    /// What `roots/list` answers when no gateway client answers it.
    pub roots: Vec<RootEntry>,
    /// Whether the user's callers share one upstream session.
    pub session_scope: SessionScope,
    /// The catalog entry the server was made from; its transport is then resolved from the
    /// entry again at every connect (the stored one is what it resolved to when saved).
    /// Boxed: a spec is copied on hot paths, and most servers have none.
    pub catalog: Option<Box<CatalogUse>>,
}

/// A server made from a catalog entry: which, the user's pinned version, and their values.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogUse {
    pub entry: String,
    /// Set when the user pinned a version; else the entry's pinned or latest one applies.
    pub version: Option<String>,
    pub values: BTreeMap<String, String>,
    /// The values of the entry's secret inputs.
    pub secrets: SecretMap,
}

impl CatalogUse {
    /// Every value by field name, secret or not, as the entry resolves them.
    pub fn all_values(&self) -> BTreeMap<String, String> {
        let mut all = self.values.clone();
        all.extend(
            self.secrets
                .expose()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        all
    }
}

/// Who shares an upstream session of a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SessionScope {
    /// One session per (user, server), shared by all their callers (the default).
    #[default]
    User,
    /// One per chat conversation and per gateway session, for stateful servers (a
    /// browser, a shell) whose state must not leak between a user's tabs; calls without
    /// a conversation use the user's session.
    Conversation,
}

impl SessionScope {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        match raw {
            "user" => Ok(Self::User),
            "conversation" => Ok(Self::Conversation),
            other => Err(InvalidInput::value(format!(
                "sessionScope '{other}' is not one of user, conversation"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Conversation => "conversation",
        }
    }
}

/// A server's sampling policy for REST, chat and gRPC calls (a gateway client answers its
/// own calls' requests).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SamplingPolicy {
    /// Refused (the default: a server spends the user's model only when allowed to).
    #[default]
    Deny,
    /// Parked until the user approves it.
    Ask,
    /// Run at once.
    Auto,
}

/// The policy and the configured provider and model requests run on.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SamplingSettings {
    #[serde(default)]
    pub policy: SamplingPolicy,
    /// A provider of `[llm.providers]`; required unless the policy is `deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// A model that provider offers; required unless the policy is `deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl SamplingSettings {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A root the server may work in (MCP `Root`): a `file://` URI and an optional name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RootEntry {
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub id: Uuid,
    pub user_id: UserId,
    pub spec: ServerSpec,
    /// A team server's group: every member uses it, each with their own connection and
    /// credentials. Loaded for a member, `user_id` is that member.
    pub team: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_paths_ending_in_mcp_mean_streamable_http() {
        let cases = [
            ("https://x.example/mcp", TransportKind::StreamableHttp),
            ("https://x.example/api/mcp/", TransportKind::StreamableHttp),
            ("https://x.example/sse", TransportKind::Sse),
            ("https://x.example/mcpx", TransportKind::Sse),
            ("https://x.example/", TransportKind::Sse),
        ];
        for (url, kind) in cases {
            assert_eq!(
                TransportKind::infer_from_url(&Url::parse(url).unwrap()),
                kind,
                "{url}"
            );
        }
    }

    #[test]
    fn transport_names_round_trip_and_unknown_is_refused() {
        for kind in [
            TransportKind::Stdio,
            TransportKind::Sse,
            TransportKind::StreamableHttp,
        ] {
            assert_eq!(TransportKind::parse(kind.as_str()).unwrap(), kind);
        }
        assert!(TransportKind::parse("websocket").is_err());
    }
}
