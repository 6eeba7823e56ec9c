//! The MCP server side: an assistant's servers re-exposed as one MCP server, over
//! streamable HTTP (`/mcp/assistants/{id}`, mounted by `api`) and over the Xiaozhi
//! WebSocket bridges ([`xiaozhi`]).
//!
//! [`GatewayHandler`] is an rmcp `ServerHandler` that only translates: every request goes
//! to [`GatewayService`], which goes through the pool. Progress of an upstream call is
//! relayed to the client as it arrives, the client's cancellation cancels the upstream
//! call, and a list_changed (or config change) of any of the user's connections tells the
//! client to list again.

// Logging and resource subscriptions are deprecated in 2026-07-28 but are what 2025-11-25
// clients (and the servers behind them) use.
#![allow(deprecated)]

pub mod rounds;
pub mod xiaozhi;

mod call;
mod downstream;
mod notices;
mod tasks;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use notices::{Listener, relay};

use crate::domain::app_ui;
use crate::error::{Error, Resource as Missing};
use crate::services::{GatewayPrincipal, GatewayService};

#[derive(Clone)]
pub struct GatewayHandler {
    service: GatewayService,
    /// Set for a bridge; an HTTP session reads the principal of each request instead
    /// (the auth middleware puts it in the request's extensions).
    fixed: Option<GatewayPrincipal>,
    max_result_bytes: usize,
    /// What this session asked for: its log level (`None`: every message) and the
    /// resources it subscribed to.
    listening: Arc<Mutex<Listening>>,
    /// Cancelled when the session's handler is dropped (rmcp drops it when the session
    /// ends: DELETE, idle expiry, a closed bridge socket), ending the session's tasks.
    session: CancellationToken,
    _session_guard: Arc<tokio_util::sync::DropGuard>,
    /// Names this session's own upstream sessions (servers whose `sessionScope` is
    /// `conversation`); they are stopped when the session ends.
    scope: Arc<str>,
    /// Set by the first call, which starts the task that ends the scope's connections.
    scope_owner: Arc<std::sync::OnceLock<crate::domain::UserId>>,
    /// Calls of 2026-07-28 clients whose upstream asked something, waiting for the
    /// client's retry (shared by every handler of the endpoint: those clients have no
    /// session).
    rounds: rounds::Rounds,
}

/// Whether the request's client speaks a revision without `initialize` (2026-07-28).
/// What a 2026-07-28 client's request carries for an upstream's rounds (its answers, the
/// upstream's state) with the client's capabilities; `None` for older clients. A state
/// this gateway made is resumed here instead (see `rounds`).
fn relayed_round(
    input_responses: Option<rmcp::model::InputResponses>,
    request_state: Option<String>,
    context: &RequestContext<RoleServer>,
) -> Option<crate::mcp::RelayedRound> {
    speaks_modern(context).then(|| crate::mcp::RelayedRound {
        input_responses,
        request_state,
        client_capabilities: context.client_capabilities(),
    })
}

/// Methods of earlier revisions that 2026-07-28 removed (its clients get -32601 for them).
const REMOVED_IN_2026_07_28: [&str; 4] = [
    "initialize",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Whether an HTTP request comes from a client of 2025-11-25 or older: one that names no
/// revision (its `initialize`, or a client before 2025-06-18) or one with `initialize`.
fn speaks_older(headers: &http::HeaderMap) -> bool {
    // Revisions are dates: those before 2026-07-28 have `initialize` (as rmcp tells).
    headers
        .get("mcp-protocol-version")
        .and_then(|value| value.to_str().ok())
        .is_none_or(|version| version < ProtocolVersion::NO_INITIALIZE.as_str())
}

/// Whether the request's client declared what `has` looks for: in this request's
/// metadata, else (a client with a session) at `initialize`. Read without copying a
/// session's capabilities on every call.
fn client_declares(
    context: &RequestContext<RoleServer>,
    has: impl Fn(&ClientCapabilities) -> bool,
) -> bool {
    match context.meta.client_capabilities() {
        Some(capabilities) => has(&capabilities),
        // A 2026-07-28 client declares them in each request or not at all.
        None if speaks_modern(context) => false,
        None => context
            .peer
            .peer_info()
            .is_some_and(|info| has(&info.capabilities)),
    }
}

/// MCP Apps: whether the client renders views (`io.modelcontextprotocol/ui` among the
/// extensions it declares).
fn declares_apps(context: &RequestContext<RoleServer>) -> bool {
    client_declares(context, |capabilities| {
        capabilities
            .extensions
            .as_ref()
            .is_some_and(|e| e.contains_key(app_ui::UI_EXTENSION))
    })
}

/// MCP Apps: the view whose call a host relays, as the host marks it in the request's
/// `_meta`: `{"io.modelcontextprotocol/ui": {"resourceUri": "<the view's gateway URI>"}}`.
fn app_view(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Option<String> {
    let marked = |meta: &JsonObject| {
        meta.get(app_ui::UI_EXTENSION)?
            .get("resourceUri")?
            .as_str()
            .map(str::to_owned)
    };
    request
        .meta
        .as_ref()
        .and_then(|meta| marked(meta))
        .or_else(|| marked(&context.meta))
}

fn speaks_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// A 2026-07-28 client learns from `resultType` what a result is, and refuses one without
/// it (the Vercel AI SDK, mastra). An upstream of an older revision sends none, and rmcp
/// passes on what it read: for such a client the gateway says the result is complete.
fn typed(result_type: &mut Option<ResultType>, modern: bool) {
    if modern {
        result_type.get_or_insert(ResultType::COMPLETE);
    }
}

/// An error as an MCP client sees it: the client's own mistakes are invalid params,
/// the rest internal errors; both carry the stable code.
fn to_mcp_error(error: Error) -> ErrorData {
    let data = Some(json!({"code": error.code()}));
    match &error {
        // The upstream's own JSON-RPC error, as it sent it (an invalid or tampered
        // requestState, a capability the client lacks, bad params).
        Error::Pool(crate::pool::PoolError::Upstream(crate::mcp::McpError::Remote {
            code,
            message,
            data: upstream_data,
        })) => ErrorData::new(
            rmcp::model::ErrorCode(*code),
            message.clone(),
            upstream_data.clone(),
        ),
        Error::NotFound(Missing::Tool | Missing::Prompt | Missing::Resource, _)
        | Error::InvalidArguments(_)
        | Error::Validation(_) => ErrorData::invalid_params(error.to_string(), data),
        _ => ErrorData::internal_error(error.to_string(), data),
    }
}

impl GatewayHandler {
    pub fn new(
        service: GatewayService,
        fixed: Option<GatewayPrincipal>,
        max_result_bytes: usize,
    ) -> Self {
        let session = CancellationToken::new();
        Self {
            service,
            fixed,
            max_result_bytes,
            listening: Arc::default(),
            _session_guard: Arc::new(session.clone().drop_guard()),
            session,
            scope: Arc::from(uuid::Uuid::new_v4().to_string()),
            scope_owner: Arc::default(),
            rounds: rounds::Rounds::new(std::time::Duration::from_secs(300)),
        }
    }

    /// Shares `rounds` with the endpoint's other handlers.
    pub fn with_rounds(mut self, rounds: rounds::Rounds) -> Self {
        self.rounds = rounds;
        self
    }

    fn principal(&self, extensions: &Extensions) -> Result<GatewayPrincipal, ErrorData> {
        if let Some(principal) = &self.fixed {
            return Ok(principal.clone());
        }
        let parts = extensions.get::<http::request::Parts>();
        let mut principal = parts
            .and_then(|parts| parts.extensions.get::<GatewayPrincipal>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("not authenticated", None))?;
        principal.older_client = parts.is_some_and(|parts| speaks_older(&parts.headers));
        Ok(principal)
    }
}

#[derive(Default)]
struct Listening {
    level: Option<LoggingLevel>,
    subscriptions: HashSet<String>,
}

/// The gateway's capabilities: tools always; resources, prompts, logging, completions
/// and subscriptions when a bound server has them.
fn capabilities(features: crate::mcp::ServerFeatures) -> ServerCapabilities {
    let mut capabilities = ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .enable_resources()
        .enable_resources_list_changed()
        .enable_prompts()
        .enable_prompts_list_changed()
        .build();
    // Every call can run as a task (gateway/tasks.rs), whatever the servers behind speak.
    capabilities
        .extensions
        .get_or_insert_with(Default::default)
        .insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
    if features.apps {
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                app_ui::UI_EXTENSION.to_owned(),
                serde_json::from_value(json!({"mimeTypes": [app_ui::APP_MIME_TYPE]}))
                    .expect("an object"),
            );
    }
    if features.logging {
        capabilities.logging = Some(Default::default());
    }
    if features.completions {
        capabilities.completions = Some(Default::default());
    }
    if features.subscribe
        && let Some(resources) = capabilities.resources.as_mut()
    {
        resources.subscribe = Some(true);
    }
    capabilities
}

/// What the gateway says of itself before it knows a session's servers (`get_info`), and
/// to a 2026-07-28 client (`server/discover`), with MCP Apps when its servers offer views.
fn server_config(apps: bool) -> ServerConfig {
    InitializeResult::new(capabilities(crate::mcp::ServerFeatures {
        resources: true,
        prompts: true,
        apps,
        ..Default::default()
    }))
    .with_server_info(Implementation::new(
        "mcp-pool gateway",
        env!("CARGO_PKG_VERSION"),
    ))
    .with_instructions(
        "The tools of one assistant's MCP servers, each named after its server and tool. \
         Some tools wait for the user's approval before they run.",
    )
}

/// rmcp runs each request in a task it spawns, whose future is as large as the largest of
/// these methods' futures, and a spawn copies it several times over: the services' futures
/// are boxed here (`Box::pin`), and `tools/call`'s own, so a call's task holds pointers,
/// not ~13 KB of state.
/// Relays to `listener` what concerns the principal's tools and bound servers (list
/// changes, and resource updates and log messages where it takes them) until the session
/// ends or the listener goes away.
async fn follow(
    service: GatewayService,
    principal: GatewayPrincipal,
    ended: CancellationToken,
    listener: Listener,
) {
    let mut changes = service.pool_changes();
    let mut notices = service.notices();
    let mut bound = service.server_ids(&principal).await.unwrap_or_default();
    loop {
        tokio::select! {
            () = ended.cancelled() => break,
            change = changes.recv() => match change {
                Ok(key) if key.user == principal.user => {
                    bound = service.server_ids(&principal).await.unwrap_or(bound);
                    if listener.tools_changed().await.is_err() {
                        break;
                    }
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
            notice = notices.recv() => match notice {
                Ok(notice)
                    if notice.key.user == principal.user
                        && bound.contains(&notice.key.server) =>
                {
                    if relay(&listener, &notice.event).await.is_err() {
                        break;
                    }
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
        if listener.is_closed() {
            break;
        }
    }
}

impl ServerHandler for GatewayHandler {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        if let Ok(principal) = self.principal(&context.extensions)
            && let Ok(features) = Box::pin(self.service.features(&principal)).await
        {
            result.capabilities = capabilities(features);
        }
        Ok(result)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = self.principal(&context.extensions)?;
        self.listening.lock().expect("listening lock").level = Some(request.level);
        Box::pin(self.service.set_log_level(&principal, request.level))
            .await
            .map_err(to_mcp_error)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let modern = speaks_modern(&context);
        Box::pin(self.service.complete(&principal, request))
            .await
            .map(|mut result| {
                typed(&mut result.result_type, modern);
                result
            })
            .map_err(to_mcp_error)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = self.principal(&context.extensions)?;
        Box::pin(self.service.subscription(&principal, &request.uri, true))
            .await
            .map_err(to_mcp_error)?;
        self.listening
            .lock()
            .expect("listening lock")
            .subscriptions
            .insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.principal(&context.extensions)?;
        // The upstream session is the user's, shared with their other sessions: it keeps
        // its subscription; this session stops relaying the resource's updates.
        self.listening
            .lock()
            .expect("listening lock")
            .subscriptions
            .remove(&request.uri);
        Ok(())
    }

    /// `server/discover` (2026-07-28): the capabilities every session gets, with MCP Apps
    /// when a bound server offers views.
    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let apps = match self.principal(&context.extensions) {
            Ok(principal) => Box::pin(self.service.features(&principal))
                .await
                .is_ok_and(|f| f.apps),
            Err(_) => false,
        };
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            server_config(apps),
        ))
    }

    fn get_info(&self) -> ServerConfig {
        server_config(false)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Ok(principal) = self.principal(&context.extensions) else {
            return;
        };
        let listener = Listener::Stream {
            peer: context.peer,
            listening: self.listening.clone(),
        };
        let (service, ended) = (self.service.clone(), self.session.clone());
        tokio::spawn(follow(service, principal, ended, listener));
    }

    /// `subscriptions/listen` (2026-07-28): every list change and resource update the
    /// gateway offers (rmcp keeps to what the client asked for and the gateway announced).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    /// One 2026-07-28 client's notices, on its `subscriptions/listen` stream until the
    /// client ends the request or the session ends.
    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let principal = self.principal(&subscription.request_context().extensions)?;
        // The resources it names are subscribed to upstream, as `resources/subscribe` does.
        for uri in subscription
            .accepted()
            .resource_subscriptions
            .iter()
            .flatten()
        {
            if let Err(error) = Box::pin(self.service.subscription(&principal, uri, true)).await {
                tracing::debug!(%uri, %error, "a listened-to resource could not be subscribed to upstream");
            }
        }
        let listener = Listener::Subscription(subscription.sink().clone());
        let (service, ended) = (self.service.clone(), self.session.clone());
        tokio::select! {
            () = follow(service, principal, ended, listener) => {}
            () = subscription.cancelled() => {}
        }
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let tools = Box::pin(self.service.tools(&principal))
            .await
            .map_err(to_mcp_error)?;
        Ok(ListToolsResult::with_all_items(
            tools.tools(declares_apps(&context)),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let modern = speaks_modern(&context);
        // A retry of one of the gateway's own rounds goes on as the round; any other call
        // of a client that declares tasks may become one (an upstream's round retried
        // too: the upstream may make a task of the retry).
        let own_round = request
            .request_state
            .as_deref()
            .is_some_and(rounds::Rounds::made_here);
        if tasks::declares_tasks(&context) && !own_round {
            let mut response = Box::pin(self.call_as_task(request, context)).await;
            if let Ok(CallToolResponse::Complete(result)) = &mut response {
                typed(&mut result.result_type, modern);
            }
            return response;
        }
        let mut response = Box::pin(self.call(request, context)).await;
        if let Ok(CallToolResponse::Complete(result)) = &mut response {
            typed(&mut result.result_type, modern);
        }
        response
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let task = Box::pin(self.task(&request.task_id, &context)).await?;
        Ok(GetTaskResult::new(task))
    }

    /// Answers to a task's input requests; keys it does not wait for are ignored.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.answer(&request.task_id, request.input_responses, &context)).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.cancel(&request.task_id, &context)).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let (resources, _) = Box::pin(self.service.resources(&principal))
            .await
            .map_err(to_mcp_error)?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let (_, templates) = Box::pin(self.service.resources(&principal))
            .await
            .map_err(to_mcp_error)?;
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let modern = speaks_modern(&context);
        // A 2026-07-28 client takes a 2026-07-28 server's rounds itself.
        let relayed = relayed_round(request.input_responses, request.request_state, &context);
        match Box::pin(
            self.service
                .read_resource(&principal, &request.uri, relayed),
        )
        .await
        {
            Ok(ReadResourceResponse::Complete(mut result)) => {
                typed(&mut result.result_type, modern);
                Ok(result.into())
            }
            Ok(asked) => Ok(asked),
            Err(error) => Err(to_mcp_error(error)),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let prompts = Box::pin(self.service.prompts(&principal))
            .await
            .map_err(to_mcp_error)?;
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let modern = speaks_modern(&context);
        // A 2026-07-28 client takes a 2026-07-28 server's rounds itself.
        let relayed = relayed_round(request.input_responses, request.request_state, &context);
        let prompt = (request.name.as_str(), request.arguments);
        match Box::pin(self.service.get_prompt(&principal, prompt, relayed)).await {
            Ok(GetPromptResponse::Complete(mut result)) => {
                typed(&mut result.result_type, modern);
                Ok(result.into())
            }
            Ok(asked) => Ok(asked),
            Err(error) => Err(to_mcp_error(error)),
        }
    }

    /// A request of a method MCP defines whose params do not fit it reaches here (rmcp
    /// reads it as a custom request): it is answered "invalid params" with the reason,
    /// not "method not found". For a 2026-07-28 client the methods that revision removed
    /// are no methods at all (SEP-2575: -32601, which goes out as HTTP 404).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let message = json!({"method": request.method, "params": request.params});
        let removed = speaks_modern(&context) && REMOVED_IN_2026_07_28.contains(&&*request.method);
        match ClientRequest::member_refusal(&message).filter(|_| !removed) {
            Some(reason) => {
                // serde's word for absent params names an internal type.
                let reason = match request.params {
                    None => "params are required".to_owned(),
                    Some(_) => reason,
                };
                Err(ErrorData::invalid_params(
                    format!("invalid params for {}: {reason}", request.method),
                    None,
                ))
            }
            None => Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            )),
        }
    }
}
