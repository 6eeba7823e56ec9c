//! Using a user's MCP servers: connect test, tools, calls, resources, prompts, health,
//! and the admin's view of live connections. Every call passes here (`call_tool_reporting`:
//! the rate limit, the lease, the call); a stored server becomes what the pool runs in
//! `runtime.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::JsonObject;
use serde_json::Value;
use uuid::Uuid;

use super::RateLimits;
use super::assistants::BindingCache;
use super::global_servers::GlobalServers;
use crate::config::Settings;
use crate::domain::{CallOrigin, CallVia, SessionScope, UserId};
use crate::error::{Error, Resource, Result};
use crate::mcp::{CallOutcome, SessionRevision};
use crate::pool::{ConnectionKey, Lease, Pool, ServerRuntime, ToolCatalog};
use crate::store::Store;

mod apps;
mod as_task;
mod assistant;
mod connections;
mod explain;
mod features;
mod runtime;
pub(crate) use runtime::{home_bytes, server_home};
mod tool_search;

pub use assistant::{AssistantTool, AssistantTools, Audience, ServerCatalog, UnavailableServer};
pub use connections::{ConnectReport, HealthReport};
pub use tool_search::{SearchArguments, called_through, checked_limit, checked_query, found_tools};

pub struct ToolCallReport {
    pub outcome: CallOutcome,
    pub latency: Duration,
    /// MCP Apps: the `ui://` view the tool declares to render its results.
    pub view: Option<String>,
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
    /// The caller takes a 2026-07-28 server's rounds itself (see `mcp::CallPeers`).
    pub relayed: Option<crate::mcp::RelayedRound>,
    /// How long the call may run, whatever the server's own timeout (a task's call).
    pub timeout: Option<Duration>,
    /// Who asked, for the call's audit row.
    pub origin: CallOrigin,
    /// A gateway client that did not declare the tasks extension (see `mcp::CallPeers`).
    pub without_tasks: bool,
    /// Told the server's own task when the server made a task of the call (see
    /// `mcp::CallPeers`).
    pub became_task: Option<Box<dyn FnOnce(crate::store::UpstreamTask) + Send + 'a>>,
    /// The task the call runs as, if any: a wait for the user's approval is listed among
    /// its input requests.
    pub task: Option<&'a crate::services::TaskHandle>,
    /// The operator's rules' decision on this very call, made by its door to know whether
    /// it runs at once (the gateway): an allowing one is taken at the one door instead of
    /// deciding again; any other is decided again there.
    pub decided: Option<super::policies::Decision>,
}

/// What a server may need from a call's user: their authorization (OAuth) and their
/// answers (elicitation, sampling), and the per-user limits they are held to.
pub struct UserFacing {
    pub oauth: super::OAuthService,
    pub elicitations: super::elicitations::Elicitations,
    pub rate_limits: Arc<RateLimits>,
    /// Where every call's audit row goes.
    pub audit: super::AuditTrail,
    /// What servers made from a catalog entry run now.
    pub catalog: super::CatalogService,
    /// The operator's rules, checked on every call here.
    pub policies: super::Policies,
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
    /// The revision its callers speak to servers of both (see `for_older_clients`).
    revision: SessionRevision,
    /// Every call's row, written here: the one door every call passes.
    audit: super::AuditTrail,
    catalog: super::CatalogService,
    policies: super::Policies,
    /// Each assistant's tool search index, kept while its tools stay the same.
    tool_indexes: tool_search::ToolIndexes,
    /// The stdio servers' sandbox, checked once at start.
    sandbox: Arc<crate::sandbox::Sandbox>,
}

impl UpstreamService {
    pub async fn new(
        store: Store,
        settings: Arc<Settings>,
        http: Arc<crate::mcp::UpstreamHttp>,
        pool: Pool,
        globals: Arc<GlobalServers>,
        bindings: BindingCache,
        user_facing: UserFacing,
    ) -> Result<Self> {
        let UserFacing {
            oauth,
            elicitations,
            rate_limits,
            audit,
            catalog,
            policies,
        } = user_facing;
        let tool_indexes = tool_search::ToolIndexes::new(settings.tool_search.model_dir()).await?;
        let sandbox = {
            let (sandbox, data_dir) = (
                settings.pool.sandbox.clone(),
                settings.storage.data_dir.clone(),
            );
            tokio::task::spawn_blocking(move || {
                crate::sandbox::Sandbox::prepare(&sandbox, &data_dir)
            })
            .await
            .map_err(|e| Error::Unexpected(anyhow::anyhow!("the sandbox check failed: {e}")))?
        };
        Ok(Self {
            sandbox,
            store,
            settings,
            pool,
            http,
            globals,
            bindings,
            rate_limits,
            oauth,
            elicitations,
            revision: SessionRevision::Newest,
            audit,
            catalog,
            policies,
            tool_indexes,
        })
    }

    /// Whether stdio servers start isolated, and what is wrong if not.
    pub fn sandbox_status(&self) -> crate::sandbox::SandboxStatus {
        self.sandbox.status()
    }

    /// The operator's rules on a call about to run, on every path: a call approved while
    /// parked is checked again (a rule may have come since). `require_approval` refuses a
    /// call that cannot wait for approval (REST, gRPC); the other doors parked it already.
    /// An allowed call has its fields redacted in `audit` and is counted by its quotas.
    #[allow(clippy::too_many_arguments)]
    async fn check_policies(
        &self,
        user: &UserId,
        server: &crate::domain::McpServer,
        tool: &rmcp::model::Tool,
        arguments: &Value,
        origin: CallOrigin,
        decided: Option<super::policies::Decision>,
        audit: &mut super::audit::CallAudit,
    ) -> Result<()> {
        if !self.policies.governs_calls() {
            return Ok(());
        }
        let (decision, decider) = match decided
            .filter(|decision| !decision.is_denied() && !decision.requires_approval())
        {
            Some(allowed) => (allowed, None),
            None => {
                let decider = self.policies.decider(user, origin.via).await?;
                (decider.decide(server, tool, Some(arguments)), Some(decider))
            }
        };
        if !decision.redact.is_empty() {
            audit.redact(&decision.redact, arguments);
        }
        let cannot_wait = matches!(origin.via, CallVia::Rest | CallVia::Grpc);
        if let Some(decider) = decider
            && (decision.is_denied() || (decision.requires_approval() && cannot_wait))
        {
            return Err(decider
                .refusal(&decision)
                .expect("a deciding rule is named"));
        }
        self.policies.charge(user, &decision.quotas).await
    }

    /// The operator's rules (for the doors that decide whether a call waits for approval).
    pub fn policies(&self) -> &super::Policies {
        &self.policies
    }

    /// The same service for callers on behalf of clients of 2025-11-25 and older (gateway
    /// clients): a server that offers 2026-07-28 too is spoken to in 2025-11-25 on a
    /// session of its own, since it shows such clients what it keeps from 2026-07-28 ones
    /// (tools that ask by server-to-client request, resource subscriptions).
    pub(crate) fn for_older_clients(&self) -> Self {
        Self {
            revision: SessionRevision::Initialize,
            ..self.clone()
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
        let lease = match self.lease_unexplained(user, server_id, scope).await {
            Ok(lease) => lease,
            Err(error) => return Err(Box::pin(self.explained(user, server_id, error)).await),
        };
        if self.revision == SessionRevision::Newest || !lease.client.speaks_modern() {
            return Ok(lease);
        }
        // The server speaks 2026-07-28: a session of the caller's revision beside it.
        let key = ConnectionKey {
            revision: self.revision,
            ..lease.key.clone()
        };
        let runtime = lease.runtime.in_revision(self.revision);
        match self
            .pool
            .lease(&key, || async { Ok::<_, Error>(runtime) })
            .await
        {
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
        origin: CallOrigin,
    ) -> Result<ToolCallReport> {
        // Its user answers what the server asks meanwhile, on their event stream.
        let caller = Caller {
            scope,
            origin,
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
        // Written however the call ends, dropped mid-way (cancelled) included.
        let mut audit = self
            .audit
            .begin_call(user, server_id, tool, caller.origin, &arguments);
        if let Err(error) = self.rate_limits.tool_call(user) {
            audit.failed(&error);
            return Err(error);
        }
        let lease = match self.lease_in(user, server_id, caller.scope).await {
            Ok(lease) => lease,
            Err(error) => {
                audit.failed(&error);
                return Err(error);
            }
        };
        audit.on_server(&lease.runtime.server);
        let result = self
            .call_on_lease(user, &lease, tool, arguments, caller, &mut audit)
            .await;
        let outcome = match &result {
            Ok((outcome, _)) if outcome.result.is_error == Some(true) => "tool_error",
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
            Ok((outcome, view)) => {
                audit.answered(&outcome.result);
                Ok(ToolCallReport {
                    outcome,
                    latency,
                    view,
                })
            }
            Err(error) => {
                let error = Box::pin(self.explained(user, server_id, error)).await;
                audit.failed(&error);
                Err(error)
            }
        }
    }

    async fn call_on_lease(
        &self,
        user: &UserId,
        lease: &Lease,
        tool: &str,
        arguments: Value,
        caller: Caller<'_>,
        audit: &mut super::audit::CallAudit,
    ) -> Result<(CallOutcome, Option<String>)> {
        let Caller {
            origin,
            live,
            downstream,
            relayed,
            timeout,
            without_tasks,
            became_task,
            decided,
            ..
        } = caller;
        let spec = &lease.runtime.server.spec;
        if spec.disabled_tools.iter().any(|t| t == tool) {
            return Err(Error::ToolDisabled(tool.to_owned()));
        }
        let catalog = self.pool.tools(lease).await?;
        let Some(listed) = catalog.get(tool) else {
            return Err(Error::NotFound(Resource::Tool, tool.to_owned()));
        };
        let view = check_audience(listed, origin)?;
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
        // A team server is its group's: a member who left it (attributes change on any
        // instance within a second) no longer calls it, live connection or not.
        if let Some(group) = &lease.runtime.server.team
            && !self.policies.attributes(user).await?.groups.contains(group)
        {
            return Err(Error::NotFound(
                Resource::McpServer,
                lease.runtime.server.id.to_string(),
            ));
        }
        self.check_policies(
            user,
            &lease.runtime.server,
            listed,
            &arguments,
            origin,
            decided,
            audit,
        )
        .await?;
        let Value::Object(arguments) = arguments else {
            unreachable!("checked above")
        };
        let max_total = Duration::from_secs(self.settings.pool.max_call_timeout_secs.into());
        let (call_timeout, max_total) = match timeout {
            Some(timeout) => (timeout, timeout),
            None => (lease.runtime.call_timeout, max_total),
        };
        // A global server is shared by every user: no one user answers its questions, so
        // without a gateway client to ask they are refused at once (see mcp::downstream).
        let server = &lease.runtime.server;
        let downstream = downstream.or_else(|| {
            (server.user_id != UserId::global()).then(|| self.elicitations.for_user(server))
        });
        let server_id = server.id;
        let became_task = became_task.map(|tell| {
            Box::new(move |task_id: &str| {
                tell(crate::store::UpstreamTask {
                    server_id,
                    task_id: task_id.to_owned(),
                })
            }) as crate::mcp::BecameTask<'_>
        });
        // Boxed: the call's future holds the request and its answer (JSON values, 80 bytes
        // each with `preserve_order`), and each caller above would copy it into its own.
        let outcome = Box::pin(lease.client.call_tool_reporting(
            tool,
            Some(arguments),
            call_timeout,
            max_total,
            crate::mcp::CallPeers {
                live,
                downstream,
                relayed,
                without_tasks,
                became_task,
            },
        ))
        .await
        .inspect_err(|e| self.pool.report(lease, e))?;
        Ok((outcome, view))
    }
}

/// MCP Apps' `visibility` at the door every call passes: a server's view calls only the
/// tools its server lets views call, and a tool only a view may call is nobody else's.
/// Gives the tool's view, which renders its result.
pub(crate) fn check_audience(
    tool: &rmcp::model::Tool,
    origin: crate::domain::CallOrigin,
) -> Result<Option<String>> {
    let ui = crate::domain::app_ui::ToolUi::of(tool.meta.as_deref());
    if origin.from_app && !ui.for_app {
        return Err(Error::AppCallRefused(format!(
            "the tool '{}' is not one its server lets its views call (its visibility is model only)",
            tool.name
        )));
    }
    if !origin.from_app && !ui.for_model {
        return Err(Error::AppCallRefused(format!(
            "the tool '{}' is only for its server's view: the host relays the view's call as an app call",
            tool.name
        )));
    }
    Ok(ui.resource_uri.map(str::to_owned))
}
