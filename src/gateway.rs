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

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Resource as Missing};
use crate::mcp::downstream::Downstream;
use crate::services::{Caller, GatewayPrincipal, GatewayService};

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

/// Passes a server's log message (at or above the session's level), resource update (of
/// a resource the session subscribed to) or resource/prompt list change on to the
/// session's client.
async fn relay(
    peer: &rmcp::Peer<RoleServer>,
    listening: &Mutex<Listening>,
    event: &crate::mcp::UpstreamEvents,
) -> Result<(), rmcp::service::ServiceError> {
    match event {
        crate::mcp::UpstreamEvents::Log(message) => {
            let wanted = match listening.lock().expect("listening lock").level {
                Some(level) => severity(message.level) >= severity(level),
                None => true,
            };
            if wanted {
                peer.notify_logging_message(message.clone()).await?;
            }
        }
        crate::mcp::UpstreamEvents::ResourceUpdated(uri) => {
            let wanted = listening
                .lock()
                .expect("listening lock")
                .subscriptions
                .contains(uri);
            if wanted {
                peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                    .await?;
            }
        }
        crate::mcp::UpstreamEvents::ResourcesChanged => {
            peer.notify_resource_list_changed().await?;
        }
        crate::mcp::UpstreamEvents::PromptsChanged => {
            peer.notify_prompt_list_changed().await?;
        }
        _ => {}
    }
    Ok(())
}

/// The gateway client of a call, asked what the server behind asks (elicitation,
/// sampling) when it declared it can answer.
struct PeerDownstream(rmcp::Peer<RoleServer>);

fn not_declared(what: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!("the client that made this call does not handle {what}"),
        None,
    )
}

fn peer_error(error: rmcp::service::ServiceError) -> ErrorData {
    match error {
        rmcp::service::ServiceError::McpError(error) => error,
        other => ErrorData::internal_error(format!("asking the client failed: {other}"), None),
    }
}

impl Downstream for PeerDownstream {
    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> futures::future::BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        Box::pin(async move {
            let url = matches!(params, ElicitRequestParams::UrlElicitationParams { .. });
            let declared = self.0.peer_info().is_some_and(|info| {
                info.capabilities.elicitation.as_ref().is_some_and(|e| {
                    if url {
                        e.url.is_some()
                    } else {
                        // A client that declares `elicitation: {}` handles forms (2025-06-18).
                        e.form.is_some() || e.url.is_none()
                    }
                })
            });
            if !declared {
                return Err(not_declared("elicitation"));
            }
            self.0.create_elicitation(params).await.map_err(peer_error)
        })
    }

    fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> futures::future::BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async move {
            if self
                .0
                .peer_info()
                .is_none_or(|info| info.capabilities.sampling.is_none())
            {
                return Err(not_declared("sampling"));
            }
            self.0.create_message(params).await.map_err(peer_error)
        })
    }

    fn roots(
        &self,
    ) -> futures::future::BoxFuture<'_, Option<Result<rmcp::model::ListRootsResult, ErrorData>>>
    {
        Box::pin(async move {
            let declared = self
                .0
                .peer_info()
                .is_some_and(|info| info.capabilities.roots.is_some());
            if !declared {
                return None;
            }
            Some(self.0.list_roots().await.map_err(peer_error))
        })
    }
}

/// `URLElicitationRequiredError` (MCP 2025-11-25).
const URL_ELICITATION_REQUIRED: i32 = -32042;

fn declares_url_elicitation(peer: &rmcp::Peer<RoleServer>) -> bool {
    peer.peer_info().is_some_and(|info| {
        info.capabilities
            .elicitation
            .as_ref()
            .is_some_and(|elicitation| elicitation.url.is_some())
    })
}

/// Whether the request's client speaks a revision without `initialize` (2026-07-28).
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

/// A call's outcome as the client gets it: a missing tool or bad arguments are protocol
/// errors; a call that was made and failed is a result the model should read.
fn call_outcome(result: Result<CallToolResult, Error>) -> Result<CallToolResult, ErrorData> {
    match result {
        Ok(result) => Ok(result),
        Err(error @ (Error::NotFound(..) | Error::InvalidArguments(_))) => Err(to_mcp_error(error)),
        Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
            "{}: {error}",
            error.code()
        ))])),
    }
}

/// An error as an MCP client sees it: the client's own mistakes are invalid params,
/// the rest internal errors; both carry the stable code.
fn to_mcp_error(error: Error) -> ErrorData {
    let data = Some(json!({"code": error.code()}));
    match &error {
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

    /// A call of a client without server-to-client requests (2026-07-28) that can answer
    /// what the upstream asks: in rounds. `None` for other clients.
    async fn call_in_rounds(
        &self,
        principal: &GatewayPrincipal,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        if !speaks_modern(context) {
            return None;
        }
        if let Some(state) = &request.request_state {
            let responses = request.input_responses.clone();
            return Some(self.rounds.resume(&principal.user, state, responses).await);
        }
        let answers = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some() || c.sampling.is_some() || c.roots.is_some());
        if !answers {
            return None;
        }
        let (service, principal_owned) = (self.service.clone(), principal.clone());
        let (name, arguments) = (request.name.to_string(), request.arguments.clone());
        let max_result_bytes = self.max_result_bytes;
        let response = self
            .rounds
            .start(&principal.user, move |downstream, cancel| {
                Box::pin(async move {
                    let caller = Caller {
                        live: None,
                        downstream: Some(downstream),
                        scope: None,
                    };
                    let result = service
                        .call(
                            &principal_owned,
                            &name,
                            arguments,
                            caller,
                            &cancel,
                            max_result_bytes,
                        )
                        .await;
                    call_outcome(result)
                })
            })
            .await;
        Some(Ok(response))
    }

    /// `tools/call`, boxed by [`ServerHandler::call_tool`]: the largest of the handler's
    /// futures, so rmcp's request future (copied on its way into a task) stays small.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        if let Some(answer) = Box::pin(self.call_in_rounds(&principal, &request, &context)).await {
            return answer;
        }
        let (live, mut progress) = tokio::sync::mpsc::unbounded_channel();
        let token = context.meta.get_progress_token();
        let cancel: CancellationToken = context.ct.clone();
        let downstream: Arc<dyn Downstream> = Arc::new(PeerDownstream(context.peer.clone()));
        let mut call = Box::pin(self.service.call(
            &principal,
            &request.name,
            request.arguments,
            Caller {
                live: Some(&live),
                downstream: Some(downstream),
                scope: Some(self.session_scope(&principal)),
            },
            &cancel,
            self.max_result_bytes,
        ));
        let relay = |update: crate::mcp::Progress| {
            let (peer, token) = (context.peer.clone(), token.clone());
            async move {
                if let Some(token) = token {
                    let mut param = ProgressNotificationParam::new(token, update.progress);
                    param.total = update.total;
                    param.message = update.message;
                    let _ = peer.notify_progress(param).await;
                }
            }
        };
        let result = loop {
            tokio::select! {
                biased;
                Some(update) = progress.recv() => relay(update).await,
                result = &mut call => break result,
            }
        };
        // Progress the upstream sent before its result goes out before the result too.
        while let Ok(update) = progress.try_recv() {
            relay(update).await;
        }
        match result {
            Ok(result) => Ok(result.into()),
            Err(error @ (Error::NotFound(..) | Error::InvalidArguments(_))) => {
                Err(to_mcp_error(error))
            }
            // 2025-11-25: a client that handles URL-mode elicitation is asked to send its
            // user to the authorization URL, then retry.
            Err(Error::AuthRequired {
                authorization_url: Some(url),
                server_id,
                insufficient_scope,
                expires_at,
            }) if declares_url_elicitation(&context.peer) => {
                let error = Error::AuthRequired {
                    authorization_url: Some(url.clone()),
                    server_id,
                    insufficient_scope,
                    expires_at,
                };
                Err(ErrorData::new(
                    rmcp::model::ErrorCode(URL_ELICITATION_REQUIRED),
                    error.to_string(),
                    Some(json!({
                        "code": error.code(),
                        "elicitations": [{
                            "mode": "url",
                            "elicitationId": uuid::Uuid::new_v4().to_string(),
                            "url": url,
                            "message": "Authorize this MCP server to continue.",
                        }],
                    })),
                ))
            }
            other => call_outcome(other).map(Into::into),
        }
    }

    /// The scope of this session's calls; the first one arranges for its upstream
    /// sessions to end with it.
    fn session_scope(&self, principal: &GatewayPrincipal) -> &str {
        if self.scope_owner.set(principal.user.clone()).is_ok() {
            let (service, user, scope) = (
                self.service.clone(),
                principal.user.clone(),
                self.scope.clone(),
            );
            let ended = self.session.clone();
            tokio::spawn(async move {
                ended.cancelled().await;
                service.end_scope(&user, &scope).await;
            });
        }
        &self.scope
    }

    fn principal(&self, extensions: &Extensions) -> Result<GatewayPrincipal, ErrorData> {
        if let Some(principal) = &self.fixed {
            return Ok(principal.clone());
        }
        extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<GatewayPrincipal>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("not authenticated", None))
    }
}

#[derive(Default)]
struct Listening {
    level: Option<LoggingLevel>,
    subscriptions: HashSet<String>,
}

/// Severity order of log levels (RFC 5424, as MCP uses them).
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
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

/// rmcp runs each request in a task it spawns, whose future is as large as the largest of
/// these methods' futures, and a spawn copies it several times over: the services' futures
/// are boxed here (`Box::pin`), and `tools/call`'s own, so a call's task holds pointers,
/// not ~13 KB of state.
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

    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(capabilities(crate::mcp::ServerFeatures {
            resources: true,
            prompts: true,
            ..Default::default()
        }))
        .with_server_info(Implementation::new(
            "mcp-pool gateway",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "The tools of one assistant's MCP servers, named {server}.{tool}. Some tools wait \
             for the user's approval before they run.",
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Ok(principal) = self.principal(&context.extensions) else {
            return;
        };
        let mut changes = self.service.pool_changes();
        let mut notices = self.service.notices();
        let service = self.service.clone();
        let listening = self.listening.clone();
        let peer = context.peer;
        let ended = self.session.clone();
        tokio::spawn(async move {
            let mut bound = service.server_ids(&principal).await.unwrap_or_default();
            loop {
                tokio::select! {
                    () = ended.cancelled() => break,
                    change = changes.recv() => match change {
                        Ok(key) if key.user == principal.user => {
                            bound = service.server_ids(&principal).await.unwrap_or(bound);
                            if peer.notify_tool_list_changed().await.is_err() {
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
                            if relay(&peer, &listening, &notice.event).await.is_err() {
                                break;
                            }
                        }
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                }
                if peer.is_transport_closed() {
                    break;
                }
            }
        });
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
        Ok(ListToolsResult::with_all_items(tools.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let modern = speaks_modern(&context);
        let mut response = Box::pin(self.call(request, context)).await;
        if let Ok(CallToolResponse::Complete(result)) = &mut response {
            typed(&mut result.result_type, modern);
        }
        response
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
        Box::pin(self.service.read_resource(&principal, &request.uri))
            .await
            .map(|mut result| {
                typed(&mut result.result_type, modern);
                result.into()
            })
            .map_err(to_mcp_error)
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
        Box::pin(
            self.service
                .get_prompt(&principal, &request.name, request.arguments),
        )
        .await
        .map(|mut result| {
            typed(&mut result.result_type, modern);
            result.into()
        })
        .map_err(to_mcp_error)
    }

    /// A request of a method MCP defines whose params do not fit it reaches here (rmcp
    /// reads it as a custom request): it is answered "invalid params" with the reason,
    /// not "method not found".
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let message = json!({"method": request.method, "params": request.params});
        match ClientRequest::member_refusal(&message) {
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
