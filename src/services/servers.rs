//! Users' MCP server definitions: create, read, update, delete, with every rule applied.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::normalize_tool_list;
use crate::cluster::{Cluster, Note};
use crate::config::Settings;
use crate::domain::{
    EmbeddedKind, MASK, McpServer, OAuthClientSettings, RemoteEndpoint, RootEntry, SamplingPolicy,
    SamplingSettings, SecretMap, SecretUrl, ServerName, ServerSpec, SessionScope, StdioLaunch,
    Transport, TransportKind, UserId,
};
use crate::error::{Error, Resource, Result};
use crate::pool::Pool;
use crate::security::UrlPolicy;
use crate::store::{Store, StoreError};

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
    fn apply(self, current: &OAuthClientSettings) -> Result<OAuthClientSettings> {
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

#[derive(Clone)]
pub struct ServerService {
    store: Store,
    settings: Arc<Settings>,
    url_policy: Arc<UrlPolicy>,
    /// Changing or deleting a server stops its live connection.
    pool: Pool,
    /// Deleting a server unbinds it everywhere.
    bindings: super::assistants::BindingCache,
    /// Other instances close their connections to a changed server too.
    cluster: Cluster,
    /// Deleting a server revokes and forgets its users' tokens.
    oauth: super::OAuthService,
}

/// An embedded server: only its kind, nothing of the other transports.
fn embedded_transport(input: &ServerInput, current: Option<&Transport>) -> Result<Transport> {
    let foreign = [
        ("baseUrl", input.base_url.is_some()),
        ("oauth", input.oauth.is_some()),
        ("headers", input.headers.is_some()),
        ("preset", input.preset.is_some()),
        ("presetArgs", input.preset_args.is_some()),
        ("command", input.command.is_some()),
        ("args", input.args.is_some()),
        ("env", input.env.is_some()),
    ];
    if let Some((field, _)) = foreign.iter().find(|(_, given)| *given) {
        return Err(Error::validation(format!(
            "{field} does not apply to embedded servers"
        )));
    }
    match (&input.embedded, current) {
        (Some(raw), _) => Ok(Transport::Embedded(EmbeddedKind::parse(raw.trim())?)),
        (None, Some(Transport::Embedded(kind))) => Ok(Transport::Embedded(*kind)),
        (None, _) => Err(Error::validation(
            "embedded is required for embedded servers (clock or calculator)",
        )),
    }
}

impl ServerService {
    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        url_policy: Arc<UrlPolicy>,
        pool: Pool,
        bindings: super::assistants::BindingCache,
        cluster: Cluster,
        oauth: super::OAuthService,
    ) -> Self {
        Self {
            store,
            settings,
            url_policy,
            pool,
            bindings,
            cluster,
            oauth,
        }
    }

    async fn stop_everywhere(&self, user: &UserId, server: Uuid) {
        self.pool.stop_server(user, server).await;
        self.cluster.tell(Note::ServerChanged {
            user: user.to_string(),
            server,
        });
    }

    pub async fn list(&self, user: &UserId) -> Result<Vec<McpServer>> {
        Ok(self.store.servers().list(user).await?)
    }

    pub async fn get(&self, user: &UserId, id: &str) -> Result<McpServer> {
        let uuid = parse_server_id(id)?;
        self.store
            .servers()
            .get(user, uuid)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::McpServer, id.to_owned()))
    }

    pub async fn create(&self, user: &UserId, input: ServerInput) -> Result<McpServer> {
        let repo = self.store.servers();
        let limit = self.settings.limits.max_servers_per_user;
        if repo.count(user).await? >= limit {
            return Err(Error::LimitReached(format!(
                "a user may define at most {limit} MCP servers"
            )));
        }
        let spec = self.build_spec(input, None).await?;
        let now = crate::domain::now();
        let server = McpServer {
            id: Uuid::now_v7(),
            user_id: user.clone(),
            spec,
            created_at: now,
            updated_at: now,
        };
        repo.insert(&server)
            .await
            .map_err(|e| duplicate_name(e, &server.spec.name))?;
        tracing::info!(user = %user, server = %server.id, transport = server.spec.transport.kind().as_str(), "MCP server created");
        Ok(server)
    }

    pub async fn update(&self, user: &UserId, id: &str, input: ServerInput) -> Result<McpServer> {
        let mut server = self.get(user, id).await?;
        let spec = self.build_spec(input, Some(&server.spec)).await?;
        if super::oauth::resource_of(&server.spec) != super::oauth::resource_of(&spec) {
            // Tokens are bound to the resource they were issued for: a server moved to
            // another origin or path must never receive them, so they are forgotten (and
            // revoked at the authorization server that issued them) before the new URL
            // is saved, and the user is asked again.
            self.oauth.server_deleted(user, server.id).await?;
        }
        server.spec = spec;
        server.updated_at = crate::domain::now();
        let updated = self
            .store
            .servers()
            .update(&server)
            .await
            .map_err(|e| duplicate_name(e, &server.spec.name))?;
        if !updated {
            return Err(Error::NotFound(Resource::McpServer, id.to_owned()));
        }
        // The next use connects with the new definition, here and on other instances.
        self.stop_everywhere(user, server.id).await;
        tracing::info!(user = %user, server = %server.id, "MCP server updated");
        Ok(server)
    }

    pub async fn delete(&self, user: &UserId, id: &str) -> Result<()> {
        let uuid = parse_server_id(id)?;
        if !self.store.servers().delete(user, uuid).await? {
            return Err(Error::NotFound(Resource::McpServer, id.to_owned()));
        }
        self.bindings.forget_all();
        self.stop_everywhere(user, uuid).await;
        // The server is gone either way; a failure here leaves only unusable rows.
        if let Err(error) = self.oauth.server_deleted(user, uuid).await {
            tracing::warn!(%error, server = %uuid, "could not forget the server's OAuth tokens");
        }
        tracing::info!(user = %user, server = %uuid, "MCP server deleted");
        Ok(())
    }

    /// Validates `input` laid over `current` (None when creating) into a complete spec.
    async fn build_spec(
        &self,
        input: ServerInput,
        current: Option<&ServerSpec>,
    ) -> Result<ServerSpec> {
        let name = match (&input.name, current) {
            (Some(raw), _) => ServerName::parse(raw)?,
            (None, Some(current)) => current.name.clone(),
            (None, None) => return Err(Error::validation("name is required")),
        };
        let kind = self.transport_kind(&input, current)?;
        // Fields of the current transport carry over only while the family is unchanged.
        let carried = current
            .map(|c| &c.transport)
            .filter(|t| t.kind().is_remote() == kind.is_remote());
        let transport = if kind == TransportKind::Embedded {
            embedded_transport(&input, current.map(|c| &c.transport))?
        } else if kind.is_remote() {
            self.remote_transport(kind, &input, carried).await?
        } else {
            self.stdio_transport(&input, carried.and_then(Transport::stdio))
                .await?
        };
        let limits = &self.settings.limits;
        let timeout_secs = match input.timeout_secs {
            Some(secs) => {
                let max = self.settings.pool.max_call_timeout_secs;
                if secs == 0 || secs > max {
                    return Err(Error::validation(format!(
                        "timeoutSecs must be between 1 and {max}"
                    )));
                }
                Some(secs)
            }
            None => current.and_then(|c| c.timeout_secs),
        };
        let tool_list =
            |field: &str, given: Option<Vec<String>>, current: Option<&Vec<String>>| match given {
                Some(list) => normalize_tool_list(field, list, limits.max_tool_list_entries),
                None => Ok(current.cloned().unwrap_or_default()),
            };
        let sampling = match input.sampling {
            Some(sampling) => self.checked_sampling(sampling)?,
            None => current.map(|c| c.sampling.clone()).unwrap_or_default(),
        };
        let roots = match input.roots {
            Some(roots) => checked_roots(roots, limits.max_tool_list_entries)?,
            None => current.map(|c| c.roots.clone()).unwrap_or_default(),
        };
        let session_scope = match &input.session_scope {
            Some(raw) => SessionScope::parse(raw)?,
            None => current.map(|c| c.session_scope).unwrap_or_default(),
        };
        Ok(ServerSpec {
            name,
            transport,
            sampling,
            roots,
            session_scope,
            is_active: input
                .is_active
                .or(current.map(|c| c.is_active))
                .unwrap_or(true),
            timeout_secs,
            disabled_tools: tool_list(
                "disabledTools",
                input.disabled_tools,
                current.map(|c| &c.disabled_tools),
            )?,
            auto_approve_tools: tool_list(
                "autoApproveTools",
                input.auto_approve_tools,
                current.map(|c| &c.auto_approve_tools),
            )?,
        })
    }

    /// A policy that runs requests must name a configured provider and a model it offers.
    fn checked_sampling(&self, sampling: SamplingSettings) -> Result<SamplingSettings> {
        if sampling.policy == SamplingPolicy::Deny {
            return Ok(sampling);
        }
        let (Some(provider), Some(model)) = (&sampling.provider, &sampling.model) else {
            return Err(Error::validation(
                "sampling.provider and sampling.model are required unless sampling.policy is deny",
            ));
        };
        let Some(configured) = self.settings.llm.providers.get(provider) else {
            return Err(Error::validation(format!(
                "sampling.provider '{provider}' is not a configured LLM provider"
            )));
        };
        if !configured.models.is_empty() && !configured.models.contains(model) {
            return Err(Error::validation(format!(
                "sampling.model '{model}' is not offered by provider '{provider}'"
            )));
        }
        Ok(sampling)
    }

    fn transport_kind(
        &self,
        input: &ServerInput,
        current: Option<&ServerSpec>,
    ) -> Result<TransportKind> {
        if let Some(raw) = &input.transport {
            return TransportKind::parse(raw);
        }
        if input.embedded.is_some() {
            return Ok(TransportKind::Embedded);
        }
        if input.preset.is_some() || input.command.is_some() {
            return Ok(TransportKind::Stdio);
        }
        if let Some(raw) = &input.base_url {
            let url = url::Url::parse(raw.trim())
                .map_err(|e| Error::validation(format!("baseUrl is not a valid URL: {e}")))?;
            return Ok(TransportKind::infer_from_url(&url));
        }
        current.map(|c| c.transport.kind()).ok_or_else(|| {
            Error::validation(
                "type is required (stdio, sse or streamableHttp), or give baseUrl or preset",
            )
        })
    }

    async fn remote_transport(
        &self,
        kind: TransportKind,
        input: &ServerInput,
        carried: Option<&Transport>,
    ) -> Result<Transport> {
        let stdio_fields = [
            ("preset", input.preset.is_some()),
            ("presetArgs", input.preset_args.is_some()),
            ("command", input.command.is_some()),
            ("args", input.args.is_some()),
            ("env", input.env.is_some()),
        ];
        if input.embedded.is_some() {
            return Err(Error::validation(format!(
                "embedded only applies to embedded servers, not {}",
                kind.as_str()
            )));
        }
        if let Some((field, _)) = stdio_fields.iter().find(|(_, given)| *given) {
            return Err(Error::validation(format!(
                "{field} only applies to stdio servers, not {}",
                kind.as_str()
            )));
        }
        let current = carried.and_then(Transport::remote);
        let url = match (&input.base_url, current) {
            // Parts sent masked keep the stored credentials, as for headers.
            (Some(raw), current) => {
                SecretUrl::merge_update(self.url_policy.check(raw).await?, current.map(|e| &e.url))?
            }
            (None, Some(endpoint)) => endpoint.url.clone(),
            (None, None) => {
                return Err(Error::validation(format!(
                    "baseUrl is required for {} servers",
                    kind.as_str()
                )));
            }
        };
        let current_headers = current.map(|e| e.headers.clone()).unwrap_or_default();
        let headers = match &input.headers {
            Some(update) => {
                self.secret_update("headers", &current_headers, update, validate_header)?
            }
            None => current_headers,
        };
        let current_oauth = current.map(|e| e.oauth.clone()).unwrap_or_default();
        let oauth = match input.oauth.clone() {
            Some(update) => update.apply(&current_oauth)?,
            None => current_oauth,
        };
        let endpoint = RemoteEndpoint {
            url,
            headers,
            oauth,
        };
        Ok(match kind {
            TransportKind::Sse => Transport::Sse(endpoint),
            _ => Transport::StreamableHttp(endpoint),
        })
    }

    async fn stdio_transport(
        &self,
        input: &ServerInput,
        current: Option<&StdioLaunch>,
    ) -> Result<Transport> {
        if input.base_url.is_some() || input.headers.is_some() || input.oauth.is_some() {
            return Err(Error::validation(
                "baseUrl, headers and oauth only apply to sse and streamableHttp servers",
            ));
        }
        if input.embedded.is_some() {
            return Err(Error::validation(
                "embedded only applies to embedded servers",
            ));
        }
        let preset_name = match (&input.preset, current) {
            (Some(name), _) => name.clone(),
            (None, Some(current)) => current.preset.clone(),
            (None, None) if input.command.is_some() => {
                return Err(Error::ForbiddenCommand(
                    "stdio servers can only be created from an admin preset; choose one from GET /api/presets".into(),
                ));
            }
            (None, None) => {
                return Err(Error::validation(
                    "preset is required for stdio servers (see GET /api/presets)",
                ));
            }
        };
        let preset = self
            .store
            .presets()
            .get(&preset_name)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::Preset, preset_name.clone()))?;
        // Slot values belong to a preset: switching presets starts from none.
        let current = current.filter(|c| c.preset == preset_name);
        let preset_args = match (&input.preset_args, current) {
            (Some(args), _) => args.clone(),
            (None, Some(current)) => current.preset_args.clone(),
            (None, None) => BTreeMap::new(),
        };
        let current_env = current.map(|c| c.env.clone()).unwrap_or_default();
        let env = match &input.env {
            Some(update) => self.secret_update("env", &current_env, update, |_, _| Ok(()))?,
            None => current_env,
        };
        let launch =
            preset
                .spec
                .resolve(&preset_args, &env, self.settings.limits.max_value_bytes)?;
        if input.command.as_ref().is_some_and(|c| c != &launch.command) {
            return Err(Error::ForbiddenCommand(format!(
                "the command of a stdio server comes from preset '{preset_name}' and cannot be chosen"
            )));
        }
        if input.args.as_ref().is_some_and(|a| a != &launch.args) {
            return Err(Error::ForbiddenCommand(format!(
                "the arguments of a stdio server come from preset '{preset_name}'; set its slots with presetArgs"
            )));
        }
        Ok(Transport::Stdio(StdioLaunch {
            preset: preset_name,
            preset_args,
            env,
            command: launch.command,
            args: launch.args,
        }))
    }

    /// Applies a headers/env update: masked values keep the stored secret, limits apply.
    fn secret_update(
        &self,
        field: &str,
        current: &SecretMap,
        update: &BTreeMap<String, String>,
        validate: impl Fn(&str, &str) -> Result<()>,
    ) -> Result<SecretMap> {
        let limits = &self.settings.limits;
        if update.len() > limits.max_secret_entries {
            return Err(Error::validation(format!(
                "{field} has more than {} entries",
                limits.max_secret_entries
            )));
        }
        for (name, value) in update {
            if value == MASK && current.get(name).is_none() {
                return Err(Error::validation(format!(
                    "{field} '{name}' holds the mask placeholder but has no stored value; send the real value"
                )));
            }
            if value.len() > limits.max_value_bytes {
                return Err(Error::validation(format!(
                    "{field} '{name}' is longer than {} bytes",
                    limits.max_value_bytes
                )));
            }
            validate(name, value)?;
        }
        Ok(current.merge_update(update.clone()))
    }
}

/// Headers the MCP transports set themselves; a user value would break the session.
const RESERVED_HEADERS: [&str; 7] = [
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

fn validate_header(name: &str, value: &str) -> Result<()> {
    http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| Error::validation(format!("headers: '{name}' is not a valid header name")))?;
    if RESERVED_HEADERS
        .iter()
        .any(|r| name.eq_ignore_ascii_case(r))
    {
        return Err(Error::validation(format!(
            "headers: '{name}' is set by the MCP transport and cannot be overridden"
        )));
    }
    http::HeaderValue::from_str(value).map_err(|_| {
        Error::validation(format!(
            "headers: the value of '{name}' is not a valid header value"
        ))
    })?;
    Ok(())
}

/// A malformed id cannot exist, so it answers exactly like a missing one.
fn parse_server_id(id: &str) -> Result<Uuid> {
    Uuid::parse_str(id).map_err(|_| Error::NotFound(Resource::McpServer, id.to_owned()))
}

fn duplicate_name(err: StoreError, name: &ServerName) -> Error {
    match err {
        StoreError::Duplicate => Error::Conflict(format!(
            "an MCP server named '{}' already exists",
            name.as_str()
        )),
        other => other.into(),
    }
}

/// Roots are `file://` URIs (the MCP specification's only kind), at most `max` of them.
fn checked_roots(roots: Vec<RootEntry>, max: usize) -> Result<Vec<RootEntry>> {
    if roots.len() > max {
        return Err(Error::validation(format!(
            "roots may list at most {max} entries"
        )));
    }
    for root in &roots {
        let parsed = url::Url::parse(&root.uri)
            .map_err(|e| Error::validation(format!("roots: '{}' is not a URI: {e}", root.uri)))?;
        if parsed.scheme() != "file" {
            return Err(Error::validation(format!(
                "roots: '{}' is not a file:// URI",
                root.uri
            )));
        }
    }
    Ok(roots)
}
