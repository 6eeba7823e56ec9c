//! Using a user's MCP servers: connect test, tools, calls, resources, prompts, health,
//! and the admin's view of live connections.
//!
//! This is where a stored server becomes something the pool can run: the preset is
//! resolved again (an admin change applies), the URL policy is checked again (DNS may
//! have changed), and the child gets only the inherited variables plus its own env.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{GetPromptResult, JsonObject, Prompt, ReadResourceResult};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::RateLimits;
use super::assistants::BindingCache;
use super::global_servers::GlobalServers;
use crate::config::Settings;
use crate::domain::tool_name::{ToolNameTable, ToolRef};
use crate::domain::{AssistantId, McpServer, SecretUrl, SessionScope, Transport, UserId};
use crate::error::{Error, Resource, Result};
use crate::mcp::{CallOutcome, ServerFeatures, UpstreamSpec, UpstreamTransport};
use crate::pool::{
    ConnectionInfo, ConnectionKey, Lease, Pool, ResourceCatalog, ServerRuntime, ToolCatalog,
};
use crate::store::Store;

/// The result of `POST /api/mcp-servers/{id}/connect`.
pub struct ConnectReport {
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    pub protocol_version: Option<String>,
    pub tool_count: usize,
    pub latency: Duration,
}

pub struct ToolCallReport {
    pub outcome: CallOutcome,
    pub latency: Duration,
}

/// One enabled tool of an assistant, under its model-facing name.
pub struct AssistantTool {
    pub name: String,
    pub server: Arc<ServerRuntime>,
    pub tool: rmcp::model::Tool,
    /// The server's catalog, to check arguments without listing again.
    pub catalog: Arc<ToolCatalog>,
}

/// A bound server whose tools could not be listed; the others are still offered.
pub struct UnavailableServer {
    pub server_id: Uuid,
    pub error: Error,
}

pub struct AssistantTools {
    /// In the table's order.
    pub tools: Vec<AssistantTool>,
    pub table: ToolNameTable,
    pub unavailable: Vec<UnavailableServer>,
}

/// One bound server's part of an assistant's tools.
pub struct ServerCatalog {
    pub server_id: Uuid,
    pub listing: Result<(Arc<ServerRuntime>, Arc<ToolCatalog>)>,
}

impl AssistantTools {
    /// Names the enabled tools of the servers that listed theirs uniquely.
    pub fn assemble(catalogs: Vec<ServerCatalog>) -> Self {
        let mut tools = Vec::new();
        let mut unavailable = Vec::new();
        for ServerCatalog { server_id, listing } in catalogs {
            match listing {
                Ok((runtime, catalog)) => {
                    let spec = &runtime.server.spec;
                    for tool in &catalog.tools {
                        if !spec.disabled_tools.iter().any(|t| *t == tool.name) {
                            tools.push((runtime.clone(), tool.clone(), catalog.clone()));
                        }
                    }
                }
                // The user switched it off: not an outage.
                Err(Error::ServerInactive) => {}
                Err(error) => unavailable.push(UnavailableServer { server_id, error }),
            }
        }
        let table = ToolNameTable::build(tools.iter().map(|(runtime, tool, _)| ToolRef {
            server_id: runtime.server.id,
            server_name: runtime.server.spec.name.as_str().to_owned(),
            tool: tool.name.to_string(),
        }));
        let tools = table
            .iter()
            .zip(tools)
            .map(|((name, _), (server, tool, catalog))| AssistantTool {
                name: name.to_owned(),
                server,
                tool,
                catalog,
            })
            .collect();
        AssistantTools {
            tools,
            table,
            unavailable,
        }
    }

    /// The tool a model-facing name stands for, through the name table.
    pub fn resolve(&self, name: &str) -> Option<&AssistantTool> {
        self.table.index_of(name).map(|i| &self.tools[i])
    }
}

pub struct HealthReport {
    pub healthy: bool,
    pub latency: Duration,
    pub error: Option<Error>,
    pub connection: Option<ConnectionInfo>,
}

/// Who makes a call, beyond its user.
#[derive(Default)]
pub struct Caller<'a> {
    /// Where progress notifications go as they arrive.
    pub live: Option<&'a tokio::sync::mpsc::UnboundedSender<crate::mcp::Progress>>,
    /// Who answers what the server asks meanwhile (elicitation, sampling, roots); `None`:
    /// the call's user, on their event stream, under the server's policies.
    pub downstream: Option<Arc<dyn crate::mcp::downstream::Downstream>>,
    /// The conversation or gateway session, for servers with a session per conversation.
    pub scope: Option<&'a str>,
}

/// What a server may need from a call's user: their authorization (OAuth) and their
/// answers (elicitation, sampling), and the per-user limits they are held to.
pub struct UserFacing {
    pub oauth: super::OAuthService,
    pub elicitations: super::elicitations::Elicitations,
    pub rate_limits: Arc<RateLimits>,
}

#[derive(Clone)]
pub struct UpstreamService {
    store: Store,
    settings: Arc<Settings>,
    pool: Pool,
    /// Where remote connections get their HTTP clients, and the URL policy they dial by.
    http: Arc<crate::mcp::UpstreamHttp>,
    /// Admin-defined servers every assistant is offered.
    globals: Arc<GlobalServers>,
    bindings: BindingCache,
    /// Per-user limits; tool calls are checked here, the one door every call passes.
    rate_limits: Arc<RateLimits>,
    /// Users' tokens for OAuth-protected servers, and what to do when one is needed.
    oauth: super::OAuthService,
    /// Where a server's questions during a call without a gateway client go: its user.
    elicitations: super::elicitations::Elicitations,
}

impl UpstreamService {
    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        http: Arc<crate::mcp::UpstreamHttp>,
        pool: Pool,
        globals: Arc<GlobalServers>,
        bindings: BindingCache,
        user_facing: UserFacing,
    ) -> Self {
        let UserFacing {
            oauth,
            elicitations,
            rate_limits,
        } = user_facing;
        Self {
            store,
            settings,
            pool,
            http,
            globals,
            bindings,
            rate_limits,
            oauth,
            elicitations,
        }
    }

    /// A refusal for want of authorization, with what the owner needs to authorize.
    async fn explained(&self, user: &UserId, server_id: &str, error: Error) -> Error {
        match &error {
            Error::Pool(crate::pool::PoolError::Upstream(crate::mcp::McpError::AuthRequired(
                challenge,
            ))) => match Uuid::parse_str(server_id) {
                Ok(id) if self.globals.get(id).is_none() => {
                    self.oauth.required(user, id, challenge).await
                }
                _ => error,
            },
            _ => error,
        }
    }

    /// `result` of an operation on a leased connection, with a refusal for want of
    /// authorization explained as at the lease (a server may let `initialize` through and
    /// refuse, or ask for more scopes, only on what follows).
    async fn explain<T>(
        &self,
        user: &UserId,
        server_id: &str,
        result: std::result::Result<T, impl Into<Error>>,
    ) -> Result<T> {
        match result {
            Ok(value) => Ok(value),
            Err(error) => Err(Box::pin(self.explained(user, server_id, error.into())).await),
        }
    }

    pub fn rate_limits(&self) -> &RateLimits {
        &self.rate_limits
    }

    pub fn globals(&self) -> &Arc<GlobalServers> {
        &self.globals
    }

    async fn lease(&self, user: &UserId, server_id: &str) -> Result<Lease> {
        self.lease_in(user, server_id, None).await
    }

    /// A lease for a call of conversation or gateway session `scope`: a server whose
    /// `sessionScope` is `conversation` has a session per scope, others the user's one.
    async fn lease_in(&self, user: &UserId, server_id: &str, scope: Option<&str>) -> Result<Lease> {
        match self.lease_unexplained(user, server_id, scope).await {
            Ok(lease) => Ok(lease),
            Err(error) => Err(Box::pin(self.explained(user, server_id, error)).await),
        }
    }

    async fn lease_unexplained(
        &self,
        user: &UserId,
        server_id: &str,
        scope: Option<&str>,
    ) -> Result<Lease> {
        let id = Uuid::parse_str(server_id)
            .map_err(|_| Error::NotFound(Resource::McpServer, server_id.to_owned()))?;
        if let Some(server) = self.globals.get(id) {
            // One shared connection for everyone.
            let key = ConnectionKey::shared(UserId::global(), id);
            return self
                .pool
                .lease(&key, || async {
                    Ok::<_, Error>(Arc::new(self.runtime(server).await?))
                })
                .await;
        }
        let shared = ConnectionKey::shared(user.clone(), id);
        let load = || self.load_runtime(user, id, server_id);
        let Some(scope) = scope else {
            return self.pool.lease(&shared, load).await;
        };
        let scoped = ConnectionKey {
            scope: Some(scope.into()),
            ..shared.clone()
        };
        // Which session, told without the database once a connection is live.
        if self.pool.runtime_of(&scoped).is_some() {
            return self.pool.lease(&scoped, load).await;
        }
        if let Some(runtime) = self.pool.runtime_of(&shared)
            && runtime.server.spec.session_scope == SessionScope::User
        {
            return self.pool.lease(&shared, load).await;
        }
        // Boxed, like every path that reads the database or connects: a call on a live
        // connection's future stays small (see `Pool::lease`).
        let runtime = Box::pin(load()).await?;
        let key = match runtime.server.spec.session_scope {
            SessionScope::Conversation => scoped,
            SessionScope::User => shared,
        };
        self.pool
            .lease(&key, || async { Ok::<_, Error>(runtime) })
            .await
    }

    async fn load_runtime(
        &self,
        user: &UserId,
        id: Uuid,
        server_id: &str,
    ) -> Result<Arc<ServerRuntime>> {
        let server = self
            .store
            .servers()
            .get(user, id)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::McpServer, server_id.to_owned()))?;
        Ok(Arc::new(self.runtime(server).await?))
    }

    /// Builds what the pool needs to run `server`, applying every rule once more.
    async fn runtime(&self, server: McpServer) -> Result<ServerRuntime> {
        if !server.spec.is_active {
            return Err(Error::ServerInactive);
        }
        let pool = &self.settings.pool;
        let mut preset_timeout = None;
        // Global servers are the admin's own definitions: no preset, no URL policy.
        let global = server.user_id == UserId::global();
        let transport = match &server.spec.transport {
            Transport::Stdio(launch) if global => UpstreamTransport::Stdio {
                command: launch.command.clone(),
                args: launch.args.clone(),
                env: launch.env.expose().clone(),
                inherited_env: self.inherited_env(),
                working_dir: self.working_dir(&server),
            },
            Transport::Sse(endpoint) if global => UpstreamTransport::Sse {
                url: endpoint.url.clone(),
                headers: endpoint.headers.expose().clone(),
            },
            Transport::StreamableHttp(endpoint) if global => UpstreamTransport::StreamableHttp {
                url: endpoint.url.clone(),
                headers: endpoint.headers.expose().clone(),
            },
            Transport::Stdio(launch) => {
                let preset = self
                    .store
                    .presets()
                    .get(&launch.preset)
                    .await?
                    .ok_or_else(|| Error::NotFound(Resource::Preset, launch.preset.clone()))?;
                preset_timeout = preset.spec.timeout_secs;
                let resolved = preset.spec.resolve(
                    &launch.preset_args,
                    &launch.env,
                    self.settings.limits.max_value_bytes,
                )?;
                UpstreamTransport::Stdio {
                    command: resolved.command,
                    args: resolved.args,
                    env: resolved.env.expose().clone(),
                    inherited_env: self.inherited_env(),
                    working_dir: self.working_dir(&server),
                }
            }
            Transport::Sse(endpoint) => UpstreamTransport::Sse {
                url: self.checked(&endpoint.url).await?,
                headers: endpoint.headers.expose().clone(),
            },
            Transport::StreamableHttp(endpoint) => UpstreamTransport::StreamableHttp {
                url: self.checked(&endpoint.url).await?,
                headers: endpoint.headers.expose().clone(),
            },
            Transport::Embedded(kind) => UpstreamTransport::Embedded(*kind),
        };
        let timeout_secs = server
            .spec
            .timeout_secs
            .or(preset_timeout)
            .unwrap_or(pool.default_call_timeout_secs);
        Ok(ServerRuntime {
            upstream: UpstreamSpec {
                label: format!("{}/{}", server.user_id, server.spec.name.as_str()),
                transport,
                connect_timeout: Duration::from_secs(pool.connect_timeout_secs),
                max_message_bytes: pool.max_message_bytes,
                url_policy: self.http.url_policy().clone(),
                http: self.http.clone(),
                // Global servers are shared by all users: no one user's tokens.
                auth: if global {
                    None
                } else {
                    self.oauth.connector(&server)
                },
                roots: server.spec.roots.clone(),
                owner: (!global).then(|| self.elicitations.for_user(&server)),
            },
            call_timeout: Duration::from_secs(timeout_secs.into()),
            server,
        })
    }

    /// The URL policy once more (DNS may have changed), credentials kept.
    async fn checked(&self, url: &SecretUrl) -> Result<SecretUrl> {
        let checked = self.http.url_policy().check(url.expose().as_str()).await?;
        Ok(SecretUrl::new(checked))
    }

    fn inherited_env(&self) -> Vec<(String, String)> {
        let mut env: BTreeMap<String, String> = self
            .settings
            .pool
            .inherited_env
            .iter()
            .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
            .collect();
        if self.settings.pool.inherited_env.iter().any(|n| n == "LANG") {
            env.entry("LANG".into()).or_insert_with(|| "C.UTF-8".into());
        }
        env.into_iter().collect()
    }

    /// `<data_dir>/work/<hash of user>/<server id>`: per user and server, no user text in paths.
    fn working_dir(&self, server: &McpServer) -> PathBuf {
        let user = hex::encode(Sha256::digest(server.user_id.as_str().as_bytes()));
        self.settings
            .storage
            .data_dir
            .join("work")
            .join(&user[..16])
            .join(server.id.to_string())
    }

    /// Connects now (reusing a live connection), re-lists the tools and times it all.
    pub async fn test_connection(&self, user: &UserId, server_id: &str) -> Result<ConnectReport> {
        let started = Instant::now();
        let lease = self.lease(user, server_id).await?;
        self.pool.invalidate(&lease.key).await;
        let listed = self.pool.tools(&lease).await;
        let tools = self.explain(user, server_id, listed).await?;
        let info = lease.client.server_info();
        Ok(ConnectReport {
            server_name: info.as_ref().map(|i| i.name.clone()),
            server_version: info.map(|i| i.version),
            protocol_version: lease.client.protocol_version(),
            tool_count: tools.tools.len(),
            latency: started.elapsed(),
        })
    }

    pub async fn tools(
        &self,
        user: &UserId,
        server_id: &str,
    ) -> Result<(Arc<ServerRuntime>, Arc<ToolCatalog>)> {
        let lease = self.lease(user, server_id).await?;
        let listed = self.pool.tools(&lease).await;
        let catalog = self.explain(user, server_id, listed).await?;
        Ok((lease.runtime.clone(), catalog))
    }

    /// A call of conversation `scope` (its own session on a conversation-scoped server),
    /// or of the user at large.
    pub async fn call_tool(
        &self,
        user: &UserId,
        server_id: &str,
        tool: &str,
        arguments: Value,
        scope: Option<&str>,
    ) -> Result<ToolCallReport> {
        // Its user answers what the server asks meanwhile, on their event stream.
        let caller = Caller {
            scope,
            ..Caller::default()
        };
        self.call_tool_reporting(user, server_id, tool, arguments, caller)
            .await
    }

    /// [`Self::call_tool`] for a caller that takes progress or answers the server's
    /// requests itself.
    pub async fn call_tool_reporting(
        &self,
        user: &UserId,
        server_id: &str,
        tool: &str,
        arguments: Value,
        caller: Caller<'_>,
    ) -> Result<ToolCallReport> {
        let started = Instant::now();
        self.rate_limits.tool_call(user)?;
        let lease = self.lease_in(user, server_id, caller.scope).await?;
        let result = self
            .call_on_lease(&lease, tool, arguments, caller.live, caller.downstream)
            .await;
        let outcome = match &result {
            Ok(outcome) if outcome.result.is_error == Some(true) => "tool_error",
            Ok(_) => "ok",
            Err(error) => error.code(),
        };
        let latency = started.elapsed();
        self.pool.metrics().tool_call(
            lease.runtime.server.spec.transport.kind().as_str(),
            outcome,
            latency,
        );
        match result {
            Ok(outcome) => Ok(ToolCallReport { outcome, latency }),
            Err(error) => Err(Box::pin(self.explained(user, server_id, error)).await),
        }
    }

    async fn call_on_lease(
        &self,
        lease: &Lease,
        tool: &str,
        arguments: Value,
        live: Option<&tokio::sync::mpsc::UnboundedSender<crate::mcp::Progress>>,
        downstream: Option<Arc<dyn crate::mcp::downstream::Downstream>>,
    ) -> Result<CallOutcome> {
        let spec = &lease.runtime.server.spec;
        if spec.disabled_tools.iter().any(|t| t == tool) {
            return Err(Error::ToolDisabled(tool.to_owned()));
        }
        let catalog = self.pool.tools(lease).await?;
        if catalog.get(tool).is_none() {
            return Err(Error::NotFound(Resource::Tool, tool.to_owned()));
        }
        let arguments = match arguments {
            Value::Null => Value::Object(JsonObject::new()),
            object @ Value::Object(_) => object,
            _ => {
                return Err(Error::InvalidArguments(vec![
                    "arguments: must be a JSON object".into(),
                ]));
            }
        };
        catalog
            .validate(tool, &arguments)
            .map_err(Error::InvalidArguments)?;
        let Value::Object(arguments) = arguments else {
            unreachable!("checked above")
        };
        let max_total = Duration::from_secs(self.settings.pool.max_call_timeout_secs.into());
        // A global server is shared by every user: no one user answers its questions, so
        // without a gateway client to ask they are refused at once (see mcp::downstream).
        let server = &lease.runtime.server;
        let downstream = downstream.or_else(|| {
            (server.user_id != UserId::global()).then(|| self.elicitations.for_user(server))
        });
        let outcome = lease
            .client
            .call_tool_reporting(
                tool,
                Some(arguments),
                lease.runtime.call_timeout,
                max_total,
                live,
                downstream,
            )
            .await
            .inspect_err(|e| self.pool.report(lease, e))?;
        Ok(outcome)
    }

    /// The enabled tools of every active server bound to the assistant, named uniquely.
    /// A server that fails is reported in `unavailable` and does not hide the others.
    pub async fn assistant_tools(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<AssistantTools> {
        Ok(AssistantTools::assemble(
            self.assistant_catalogs(user, assistant).await?,
        ))
    }

    /// Each server bound to the assistant (and each global one) with its live runtime and
    /// tool catalog, or why it has none. Cheap when all are connected: a lease and a
    /// cache lookup each.
    pub async fn assistant_catalogs(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Vec<ServerCatalog>> {
        let mut bound = (*self.bindings.get(user, assistant).await?).clone();
        bound.extend(self.globals.ids());
        Ok(futures::future::join_all(bound.iter().map(|id| async move {
            ServerCatalog {
                server_id: *id,
                listing: self.tools(user, &id.to_string()).await,
            }
        }))
        .await)
    }

    /// What the server supports beyond tools, from its `initialize` answer.
    pub async fn features(&self, user: &UserId, server_id: &str) -> Result<ServerFeatures> {
        Ok(self.lease(user, server_id).await?.client.capabilities())
    }

    /// `logging/setLevel` on the user's session with the server (shared by the user's
    /// callers: the last level set applies to all of them).
    #[allow(deprecated)]
    pub async fn set_log_level(
        &self,
        user: &UserId,
        server_id: &str,
        level: rmcp::model::LoggingLevel,
    ) -> Result<()> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .set_level(level, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    pub async fn complete(
        &self,
        user: &UserId,
        server_id: &str,
        params: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .complete(params, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    /// `resources/subscribe` or `resources/unsubscribe` on the user's session.
    pub async fn subscription(
        &self,
        user: &UserId,
        server_id: &str,
        uri: &str,
        subscribe: bool,
    ) -> Result<()> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .subscription(uri, subscribe, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    /// Every server's log messages and resource updates (filter by user).
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::pool::UpstreamNotice>> {
        self.pool.subscribe_notices()
    }

    pub async fn resources(&self, user: &UserId, server_id: &str) -> Result<Arc<ResourceCatalog>> {
        let lease = self.lease(user, server_id).await?;
        let listed = self.pool.resources(&lease).await;
        self.explain(user, server_id, listed).await
    }

    pub async fn read_resource(
        &self,
        user: &UserId,
        server_id: &str,
        uri: &str,
    ) -> Result<ReadResourceResult> {
        if uri.is_empty() || uri.len() > 4096 {
            return Err(Error::validation("uri must be 1 to 4096 characters"));
        }
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .read_resource(uri, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    pub async fn prompts(&self, user: &UserId, server_id: &str) -> Result<Arc<Vec<Prompt>>> {
        let lease = self.lease(user, server_id).await?;
        let listed = self.pool.prompts(&lease).await;
        self.explain(user, server_id, listed).await
    }

    pub async fn get_prompt(
        &self,
        user: &UserId,
        server_id: &str,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .get_prompt(name, arguments, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    /// Seed 000's health check: a `ping` through the pool. Failures are reported, not raised,
    /// except for "no such server".
    pub async fn health(&self, user: &UserId, server_id: &str) -> Result<HealthReport> {
        let started = Instant::now();
        let result = async {
            let lease = self.lease(user, server_id).await?;
            lease
                .client
                .ping(lease.runtime.call_timeout)
                .await
                .inspect_err(|e| self.pool.report(&lease, e))?;
            Ok::<_, Error>(lease.key)
        }
        .await;
        let key = Uuid::parse_str(server_id)
            .ok()
            .map(|server| ConnectionKey::shared(user.clone(), server));
        let connection = key.and_then(|k| self.pool.connection(&k));
        match result {
            Ok(_) => Ok(HealthReport {
                healthy: true,
                latency: started.elapsed(),
                error: None,
                connection,
            }),
            Err(err @ Error::NotFound(Resource::McpServer, _)) => Err(err),
            Err(err) => Ok(HealthReport {
                healthy: false,
                latency: started.elapsed(),
                error: Some(err),
                connection,
            }),
        }
    }

    /// Connections whose cached lists were just dropped.
    pub fn pool_changes(&self) -> tokio::sync::broadcast::Receiver<ConnectionKey> {
        self.pool.subscribe_changes()
    }

    pub fn connections(&self) -> Vec<ConnectionInfo> {
        self.pool.connections()
    }

    fn admin_key(user: &str, server: &str) -> Result<ConnectionKey> {
        let not_found = || Error::NotFound(Resource::Connection, format!("{user}/{server}"));
        Ok(ConnectionKey::shared(
            UserId::parse(user).map_err(|_| not_found())?,
            Uuid::parse_str(server).map_err(|_| not_found())?,
        ))
    }

    /// Stops the upstream sessions of a conversation or gateway session that ended.
    pub async fn end_scope(&self, user: &UserId, scope: &str) {
        let stopped = self.pool.stop_scope(user, scope).await;
        if stopped > 0 {
            tracing::info!(%user, scope, stopped, "stopped the connections of an ended session");
        }
    }

    pub async fn stop_connection(&self, user: &str, server: &str) -> Result<()> {
        let key = Self::admin_key(user, server)?;
        if !self.pool.stop_server(&key.user, key.server).await {
            return Err(Error::NotFound(
                Resource::Connection,
                format!("{user}/{server}"),
            ));
        }
        tracing::info!(user = %key.user, server = %key.server, "connection stopped by an admin");
        Ok(())
    }

    pub async fn refresh_connection(&self, user: &str, server: &str) -> Result<ConnectionInfo> {
        let key = Self::admin_key(user, server)?;
        let not_found = || Error::NotFound(Resource::Connection, format!("{user}/{server}"));
        if !self.pool.refresh(&key).await {
            return Err(not_found());
        }
        self.pool.connection(&key).ok_or_else(not_found)
    }
}
