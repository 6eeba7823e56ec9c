//! One live MCP client session, and requests on it that always time out.

use std::time::Duration;

use futures::StreamExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, GetPromptRequest,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    InputRequiredResult, InputResponses, JsonObject, ListPromptsRequest,
    ListResourceTemplatesRequest, ListResourcesRequest, ListToolsRequest, PaginatedRequestParams,
    Prompt, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceTemplate, ServerResult, Tool,
};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::{Peer, RoleClient};

use super::McpError;
use super::auth::ChallengeSlot;
use super::handler::PoolClientHandler;

mod task;

/// Upper bound on pages followed for one list, so a server cannot loop us forever.
const MAX_LIST_PAGES: usize = 64;

/// How long a call whose last progress fell short of its total waits, after its result,
/// for progress the server sent before that result (see `call_tool_reporting`).
const LATE_PROGRESS_WAIT: Duration = Duration::from_millis(100);

/// One `notifications/progress` received during a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Keeps one progress notification of a call and passes it on to a live listener.
fn note_progress(
    update: rmcp::model::ProgressNotificationParam,
    live: Option<&tokio::sync::mpsc::UnboundedSender<Progress>>,
    into: &mut Vec<Progress>,
) {
    let update = Progress {
        progress: update.progress,
        total: update.total,
        message: update.message,
    };
    if let Some(live) = live {
        let _ = live.send(update.clone());
    }
    into.push(update);
}

/// A tool call's result plus the progress the server reported along the way.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub result: CallToolResult,
    pub progress: Vec<Progress>,
    /// Set when the call was made for a caller that takes a 2026-07-28 server's rounds
    /// itself ([`CallPeers::relayed`]) and the server asked for input: what it asked, to
    /// go back to that caller as it is (`result` is then empty).
    pub input_required: Option<InputRequiredResult>,
}

/// Who a call reports to and who answers for it.
#[derive(Default)]
pub struct CallPeers<'a> {
    /// Where each progress notification goes as it arrives.
    pub live: Option<&'a tokio::sync::mpsc::UnboundedSender<Progress>>,
    /// Who answers what the server asks meanwhile (see `downstream`).
    pub downstream: Option<std::sync::Arc<dyn super::downstream::Downstream>>,
    /// The caller takes a 2026-07-28 server's `input_required` rounds itself (a 2026-07-28
    /// gateway client): one round is sent with the caller's answers and the server's
    /// state, and what the server asks goes back to the caller unchanged, its keys and
    /// state the server's own. `None`: the pool answers the rounds.
    pub relayed: Option<RelayedRound>,
    /// The caller did not declare the tasks extension (a gateway client): the server is
    /// not told the pool would take a task, so it answers as it would that client
    /// directly (a tool it runs only as a task: -32021). Otherwise the pool declares the
    /// extension to a server that offers it and follows a task made of the call.
    pub without_tasks: bool,
    /// Told the server's task id when the server made a task of the call: a gateway
    /// client's call then becomes a task at once, as the server decided, instead of after
    /// the inline wait, and a task of the pool records what it follows.
    pub became_task: Option<BecameTask<'a>>,
}

/// What a caller is told when the server makes a task of its call: the server's task id.
pub type BecameTask<'a> = Box<dyn FnOnce(&str) + Send + 'a>;

/// A caller's retry of a 2026-07-28 round: its answers and the server's `requestState`,
/// and what the caller can answer (the server asks only for that, so it sees the caller's
/// capabilities rather than the pool's).
#[derive(Debug, Clone, Default)]
pub struct RelayedRound {
    pub input_responses: Option<InputResponses>,
    pub request_state: Option<String>,
    pub client_capabilities: Option<rmcp::model::ClientCapabilities>,
}

impl RelayedRound {
    /// What the retry's params carry: the caller's answers and the server's state.
    fn retry(self) -> (Option<InputResponses>, Option<String>) {
        (self.input_responses, self.request_state)
    }

    /// The request metadata that names the caller's capabilities.
    fn meta(&self) -> Option<rmcp::model::RequestMetaObject> {
        let capabilities = self.client_capabilities.clone()?;
        let mut meta = rmcp::model::RequestMetaObject::default();
        meta.set_client_capabilities(capabilities);
        Some(meta)
    }
}

/// Which optional feature families the server announced at initialize.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerFeatures {
    pub resources: bool,
    pub prompts: bool,
    pub logging: bool,
    pub completions: bool,
    /// `resources/subscribe`.
    pub subscribe: bool,
    /// MCP Apps (`io.modelcontextprotocol/ui` among its extensions).
    pub apps: bool,
}

/// A connected, initialized MCP session. Cheap to share behind an `Arc`: requests take
/// `&self` and run concurrently on the one connection.
pub struct McpClient {
    service: RunningService<RoleClient, PoolClientHandler>,
    /// Tells a request the server refused for want of authorization from other failures.
    challenges: ChallengeSlot,
    /// A 2026-07-28 server's notices (it has no session stream).
    changes: Option<super::listen::ChangeListener>,
    /// A stdio server's process.
    stdio: Option<StdioProcess>,
    /// Why the pool ended the session while requests still held it: what they fail with.
    ended_by_pool: std::sync::OnceLock<String>,
}

/// A stdio server's process: its group, its limits, and why it ended once it has.
#[derive(Debug, Clone)]
pub(crate) struct StdioProcess {
    pub group: i32,
    pub limits: super::stdio::StdioLimits,
    pub exit: super::stdio::ExitNote,
}

/// Sends `notifications/cancelled` if the request is abandoned (its caller went away)
/// before the answer came, so the upstream can stop working on it.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: rmcp::model::RequestId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(peer) = self.peer.take() {
            let id = self.id.clone();
            tokio::spawn(async move {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some("the caller went away".into()),
                    ))
                    .await;
            });
        }
    }
}

impl McpClient {
    pub(super) fn new(
        service: RunningService<RoleClient, PoolClientHandler>,
        challenges: ChallengeSlot,
        changes: Option<super::listen::ChangeListener>,
        stdio: Option<StdioProcess>,
    ) -> Self {
        Self {
            service,
            challenges,
            changes,
            stdio,
            ended_by_pool: std::sync::OnceLock::new(),
        }
    }

    /// A stdio server's process group (its leader's pid).
    pub fn process_group(&self) -> Option<i32> {
        self.stdio.as_ref().map(|process| process.group)
    }

    /// A stdio server's limits, as its cgroup enforces them (none without one).
    pub fn stdio_limits(&self) -> super::stdio::StdioLimits {
        self.stdio
            .as_ref()
            .map(|process| process.limits)
            .unwrap_or_default()
    }

    /// Why a stdio server ended (its exit status, a limit it went over), once it has.
    pub fn exit_cause(&self) -> Option<String> {
        self.stdio.as_ref()?.exit.get().cloned()
    }

    /// A failed request's error in words: a refusal for want of authorization as that,
    /// and a lost stdio server with the reason it ended.
    fn explain(&self, error: rmcp::service::ServiceError) -> McpError {
        let error = self.challenges.explain(error.into());
        let cause = self
            .ended_by_pool
            .get()
            .cloned()
            .or_else(|| self.exit_cause());
        match (&error, cause) {
            (McpError::Transport(_), Some(cause)) => McpError::Transport(cause),
            _ => error,
        }
    }

    pub fn server_info(&self) -> Option<Implementation> {
        self.service
            .peer()
            .peer_info()
            .and_then(|info| info.server_info.clone())
    }

    pub fn protocol_version(&self) -> Option<String> {
        self.service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.to_string())
    }

    pub fn capabilities(&self) -> ServerFeatures {
        self.service
            .peer()
            .peer_info()
            .map(|info| ServerFeatures {
                resources: info.capabilities.resources.is_some(),
                prompts: info.capabilities.prompts.is_some(),
                logging: info.capabilities.logging.is_some(),
                completions: info.capabilities.completions.is_some(),
                subscribe: info
                    .capabilities
                    .resources
                    .as_ref()
                    .and_then(|r| r.subscribe)
                    .unwrap_or(false),
                apps: info
                    .capabilities
                    .extensions
                    .as_ref()
                    .is_some_and(|e| e.contains_key(crate::domain::app_ui::UI_EXTENSION)),
            })
            .unwrap_or_default()
    }

    /// True once the transport is gone (child exited, stream closed).
    pub(crate) fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    async fn request(
        &self,
        request: ClientRequest,
        timeout: Duration,
    ) -> Result<ServerResult, McpError> {
        self.request_with(request, PeerRequestOptions::with_timeout(timeout))
            .await
    }

    async fn request_with(
        &self,
        request: ClientRequest,
        options: PeerRequestOptions,
    ) -> Result<ServerResult, McpError> {
        let peer = self.service.peer();
        let handle = peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| self.explain(e))?;
        let mut guard = CancelOnDrop {
            peer: Some(peer.clone()),
            id: handle.id.clone(),
        };
        let result = handle.await_response().await;
        // Answered, or timed out (rmcp then sends the cancellation itself).
        guard.peer = None;
        result.map_err(|e| self.explain(e))
    }

    async fn list_all<T>(
        &self,
        timeout: Duration,
        make: impl Fn(Option<PaginatedRequestParams>) -> ClientRequest,
        take: impl Fn(ServerResult) -> Option<(Vec<T>, Option<String>)>,
    ) -> Result<Vec<T>, McpError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = cursor
                .take()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let result = self.request(make(params), timeout).await?;
            let (page, next) =
                take(result).ok_or_else(|| McpError::Protocol("not a list result".into()))?;
            items.extend(page);
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(items),
            }
        }
        Err(McpError::Protocol(format!(
            "more than {MAX_LIST_PAGES} pages"
        )))
    }

    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<Tool>, McpError> {
        self.list_all(
            timeout,
            |params| {
                ClientRequest::ListToolsRequest(match params {
                    Some(p) => ListToolsRequest::with_param(p),
                    None => ListToolsRequest::default(),
                })
            },
            |result| match result {
                ServerResult::ListToolsResult(r) => Some((r.tools, r.next_cursor)),
                _ => None,
            },
        )
        .await
    }

    pub async fn list_resources(&self, timeout: Duration) -> Result<Vec<Resource>, McpError> {
        self.list_all(
            timeout,
            |params| {
                ClientRequest::ListResourcesRequest(match params {
                    Some(p) => ListResourcesRequest::with_param(p),
                    None => ListResourcesRequest::default(),
                })
            },
            |result| match result {
                ServerResult::ListResourcesResult(r) => Some((r.resources, r.next_cursor)),
                _ => None,
            },
        )
        .await
    }

    pub async fn list_resource_templates(
        &self,
        timeout: Duration,
    ) -> Result<Vec<ResourceTemplate>, McpError> {
        self.list_all(
            timeout,
            |params| {
                ClientRequest::ListResourceTemplatesRequest(match params {
                    Some(p) => ListResourceTemplatesRequest::with_param(p),
                    None => ListResourceTemplatesRequest::default(),
                })
            },
            |result| match result {
                ServerResult::ListResourceTemplatesResult(r) => {
                    Some((r.resource_templates, r.next_cursor))
                }
                _ => None,
            },
        )
        .await
    }

    pub async fn list_prompts(&self, timeout: Duration) -> Result<Vec<Prompt>, McpError> {
        self.list_all(
            timeout,
            |params| {
                ClientRequest::ListPromptsRequest(match params {
                    Some(p) => ListPromptsRequest::with_param(p),
                    None => ListPromptsRequest::default(),
                })
            },
            |result| match result {
                ServerResult::ListPromptsResult(r) => Some((r.prompts, r.next_cursor)),
                _ => None,
            },
        )
        .await
    }

    // Logging and resource subscriptions are deprecated in 2026-07-28 but are what
    // 2025-11-25 clients and servers use.
    #[allow(deprecated)]
    pub async fn set_level(
        &self,
        level: rmcp::model::LoggingLevel,
        timeout: Duration,
    ) -> Result<(), McpError> {
        let request = ClientRequest::SetLevelRequest(rmcp::model::SetLevelRequest::new(
            rmcp::model::SetLevelRequestParams::new(level),
        ));
        self.request(request, timeout).await.map(|_| ())
    }

    pub async fn complete(
        &self,
        params: rmcp::model::CompleteRequestParams,
        timeout: Duration,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        let request = ClientRequest::CompleteRequest(rmcp::model::CompleteRequest::new(params));
        match self.request(request, timeout).await? {
            ServerResult::CompleteResult(result) => Ok(result),
            other => Err(unexpected(&other)),
        }
    }

    /// `resources/subscribe` (`subscribe`) or `resources/unsubscribe`.
    #[allow(deprecated)]
    pub async fn subscription(
        &self,
        uri: &str,
        subscribe: bool,
        timeout: Duration,
    ) -> Result<(), McpError> {
        // 2026-07-28 has no resources/subscribe: the listening request names the resource.
        if let Some(changes) = &self.changes
            && changes.resource(uri, subscribe)
        {
            return Ok(());
        }
        let request = if subscribe {
            ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
                rmcp::model::SubscribeRequestParams::new(uri),
            ))
        } else {
            ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
                rmcp::model::UnsubscribeRequestParams::new(uri),
            ))
        };
        self.request(request, timeout).await.map(|_| ())
    }

    pub async fn ping(&self, timeout: Duration) -> Result<(), McpError> {
        let request = ClientRequest::PingRequest(rmcp::model::PingRequest::default());
        self.request(request, timeout).await.map(|_| ())
    }

    pub async fn read_resource(
        &self,
        uri: &str,
        timeout: Duration,
    ) -> Result<ReadResourceResult, McpError> {
        let mut params = ReadResourceRequestParams::new(uri);
        let mut rounds = Rounds::default();
        loop {
            let request =
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params.clone()));
            match self.request(request, timeout).await? {
                ServerResult::ReadResourceResult(result) => return Ok(result),
                ServerResult::InputRequiredResult(asked) => {
                    (params.input_responses, params.request_state) =
                        rounds.answer(&self.service, asked).await?;
                }
                other => return Err(unexpected(&other)),
            }
        }
    }

    /// `resources/read` for a caller that takes a 2026-07-28 server's rounds itself (see
    /// [`CallPeers::relayed`]), as [`Self::get_prompt_relayed`] for prompts.
    pub async fn read_resource_relayed(
        &self,
        uri: &str,
        timeout: Duration,
        round: RelayedRound,
    ) -> Result<ReadResourceResponse, McpError> {
        if !self.speaks_modern() {
            return self.read_resource(uri, timeout).await.map(Into::into);
        }
        let mut params = ReadResourceRequestParams::new(uri);
        let mut options = PeerRequestOptions::with_timeout(timeout);
        if let Some(meta) = round.meta() {
            options = options.with_meta(meta);
        }
        (params.input_responses, params.request_state) = round.retry();
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params));
        match self.request_with(request, options).await? {
            ServerResult::ReadResourceResult(result) => Ok(result.into()),
            ServerResult::InputRequiredResult(asked) => {
                Ok(ReadResourceResponse::InputRequired(asked))
            }
            other => Err(unexpected(&other)),
        }
    }

    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
    ) -> Result<GetPromptResult, McpError> {
        let mut params = prompt_params(name, arguments);
        let mut rounds = Rounds::default();
        loop {
            let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params.clone()));
            match self.request(request, timeout).await? {
                ServerResult::GetPromptResult(result) => return Ok(result),
                ServerResult::InputRequiredResult(asked) => {
                    (params.input_responses, params.request_state) =
                        rounds.answer(&self.service, asked).await?;
                }
                other => return Err(unexpected(&other)),
            }
        }
    }

    /// `prompts/get` for a caller that takes a 2026-07-28 server's rounds itself (see
    /// [`CallPeers::relayed`]): one round, and what the server asks goes back as it is. A
    /// server of an older revision is asked as by [`Self::get_prompt`].
    pub async fn get_prompt_relayed(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
        round: RelayedRound,
    ) -> Result<GetPromptResponse, McpError> {
        if !self.speaks_modern() {
            return self
                .get_prompt(name, arguments, timeout)
                .await
                .map(Into::into);
        }
        let mut params = prompt_params(name, arguments);
        let mut options = PeerRequestOptions::with_timeout(timeout);
        if let Some(meta) = round.meta() {
            options = options.with_meta(meta);
        }
        (params.input_responses, params.request_state) = round.retry();
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
        match self.request_with(request, options).await? {
            ServerResult::GetPromptResult(result) => Ok(result.into()),
            ServerResult::InputRequiredResult(asked) => Ok(GetPromptResponse::InputRequired(asked)),
            other => Err(unexpected(&other)),
        }
    }

    /// Calls a tool. `timeout` is an idle timeout: each progress notification restarts it,
    /// and `max_total` bounds the whole call.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
        max_total: Duration,
    ) -> Result<CallOutcome, McpError> {
        self.call_tool_reporting(name, arguments, timeout, max_total, CallPeers::default())
            .await
    }

    /// The session speaks a revision without `initialize` (2026-07-28 and later).
    pub fn speaks_modern(&self) -> bool {
        self.service
            .peer()
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize())
    }

    /// [`Self::call_tool`], reporting to and answered by `peers`.
    pub async fn call_tool_reporting(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        timeout: Duration,
        max_total: Duration,
        peers: CallPeers<'_>,
    ) -> Result<CallOutcome, McpError> {
        let CallPeers {
            live,
            downstream,
            relayed,
            without_tasks,
            mut became_task,
        } = peers;
        // In flight until this function returns or is dropped: what the server asks
        // meanwhile goes to `downstream`.
        let asker = downstream.clone();
        let _caller = self.service.service().callers.enter(downstream);
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = arguments;
        // A server of an older revision asks in requests and makes no rounds: a state the
        // caller names cannot be its own, and its call is made afresh.
        let (relayed, meta) = match relayed {
            Some(round) if self.speaks_modern() => {
                let meta = round.meta();
                (params.input_responses, params.request_state) = round.retry();
                (true, meta)
            }
            _ => (false, None),
        };
        // A relayed round names its caller's capabilities, tasks among them or not.
        let meta = match meta {
            None if !without_tasks && self.offers_tasks() => Some(self.meta_declaring_tasks()),
            meta => meta,
        };
        // A 2026-07-28 server asks its questions in rounds (SEP-2322): each is answered
        // as a server-to-client request would be (the caller, else the user) and the call
        // sent again with the answers and the server's state; progress spans the rounds.
        let mut rounds = Rounds::default();
        let mut progress = Vec::new();
        loop {
            let (result, more) = self
                .call_tool_round(params.clone(), (timeout, max_total), live, meta.clone())
                .await?;
            progress.extend(more);
            match result {
                ServerResult::CallToolResult(result) => {
                    return Ok(CallOutcome {
                        result,
                        progress,
                        input_required: None,
                    });
                }
                ServerResult::InputRequiredResult(asked) if relayed => {
                    return Ok(CallOutcome {
                        result: CallToolResult::success(Vec::new()),
                        progress,
                        input_required: Some(asked),
                    });
                }
                ServerResult::InputRequiredResult(asked) => {
                    (params.input_responses, params.request_state) =
                        rounds.answer(&self.service, asked).await?;
                }
                ServerResult::CreateTaskResult(created) => {
                    if let Some(tell) = became_task.take() {
                        tell(&created.task.task_id);
                    }
                    // The requests that follow it declare the extension as the call did.
                    let meta = meta
                        .clone()
                        .filter(|meta| {
                            meta.client_capabilities()
                                .is_some_and(|capabilities| capabilities.supports_tasks())
                        })
                        .unwrap_or_else(|| self.meta_declaring_tasks());
                    let result = self
                        .follow_task(
                            created.task,
                            meta,
                            (timeout, max_total),
                            live,
                            asker.clone(),
                            &mut progress,
                        )
                        .await?;
                    return Ok(CallOutcome {
                        result,
                        progress,
                        input_required: None,
                    });
                }
                other => return Err(unexpected(&other)),
            }
        }
    }

    /// One `tools/call` request of a call, with the progress reported while it ran.
    async fn call_tool_round(
        &self,
        params: CallToolRequestParams,
        (timeout, max_total): (Duration, Duration),
        live: Option<&tokio::sync::mpsc::UnboundedSender<Progress>>,
        meta: Option<rmcp::model::RequestMetaObject>,
    ) -> Result<(ServerResult, Vec<Progress>), McpError> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut options = PeerRequestOptions::with_timeout(timeout)
            .reset_timeout_on_progress()
            .with_max_total_timeout(max_total.max(timeout));
        if let Some(meta) = meta {
            options = options.with_meta(meta);
        }
        let peer = self.service.peer();
        let handle = peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| self.explain(e))?;
        // Subscribed right after sending: the first progress can only follow a round trip.
        let mut progress_stream = self
            .service
            .service()
            .progress
            .subscribe(handle.progress_token.clone())
            .await;
        let mut guard = CancelOnDrop {
            peer: Some(peer.clone()),
            id: handle.id.clone(),
        };
        let response = handle.await_response();
        tokio::pin!(response);
        let mut progress = Vec::new();
        let result = loop {
            tokio::select! {
                result = &mut response => break result,
                Some(update) = progress_stream.next() => note_progress(update, live, &mut progress),
            }
        };
        guard.peer = None;
        // rmcp handles each notification in a task of its own, so progress sent before the
        // result may be dispatched just after it: give those tasks a turn and take what is
        // queued. A busy machine may run them later still (one extra turn was not enough
        // for the conformance suite's progress scenario under the CI's load): while the
        // last progress seen is short of its total, wait a little for the rest.
        tokio::task::yield_now().await;
        let deadline = tokio::time::Instant::now() + LATE_PROGRESS_WAIT;
        loop {
            while let Some(Some(update)) = futures::FutureExt::now_or_never(progress_stream.next())
            {
                note_progress(update, live, &mut progress);
            }
            let short_of_total = progress
                .last()
                .is_some_and(|p| p.total.is_some_and(|total| p.progress < total));
            if !short_of_total {
                break;
            }
            match tokio::time::timeout_at(deadline, progress_stream.next()).await {
                Ok(Some(update)) => note_progress(update, live, &mut progress),
                _ => break,
            }
        }
        let result = result.map_err(|e| self.explain(e))?;
        Ok((result, progress))
    }

    /// Closes the session (for stdio: closes stdin, then TERM, then KILL).
    pub async fn close(&mut self, timeout: Duration) {
        let _ = self.service.close_with_timeout(timeout).await;
    }

    /// Ends the session while requests still hold it (a stop during a call): its loop is
    /// cancelled, which closes the transport as `close` does (a stdio server's whole
    /// group ended), and each waiting request fails with `reason`. Returns once the
    /// process is gone (or the transport closed), or after `timeout`.
    pub async fn end_now(&self, reason: &str, timeout: Duration) {
        let _ = self.ended_by_pool.set(reason.to_owned());
        self.service.cancellation_token().cancel();
        let gone = async {
            loop {
                let ended = match &self.stdio {
                    Some(process) => !super::stdio::group_alive(process.group),
                    None => self.service.peer().is_transport_closed(),
                };
                if ended {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let _ = tokio::time::timeout(timeout, gone).await;
    }
}

fn prompt_params(name: &str, arguments: Option<JsonObject>) -> GetPromptRequestParams {
    let params = GetPromptRequestParams::new(name);
    match arguments {
        Some(arguments) => params.with_arguments(arguments),
        None => params,
    }
}

/// The `input_required` rounds of one request (SEP-2322), at most rmcp's cap of them.
#[derive(Default)]
struct Rounds {
    taken: usize,
    /// Rounds in a row that asked nothing and only carried state (rmcp waits a little
    /// longer before each).
    state_only: usize,
}

impl Rounds {
    /// The inputs and state for the next round of a request the server answered with
    /// `asked`.
    async fn answer(
        &mut self,
        service: &RunningService<RoleClient, PoolClientHandler>,
        asked: rmcp::model::InputRequiredResult,
    ) -> Result<(Option<rmcp::model::InputResponses>, Option<String>), McpError> {
        self.taken += 1;
        if self.taken >= rmcp::model::DEFAULT_MRTR_MAX_ROUNDS {
            return Err(McpError::Protocol(format!(
                "the server still asked for input after {} rounds",
                self.taken
            )));
        }
        service
            .prepare_input_required_retry(asked, &mut self.state_only)
            .await
            .map_err(McpError::from)
    }
}

fn unexpected(result: &ServerResult) -> McpError {
    let text = serde_json::to_string(result).unwrap_or_default();
    McpError::Protocol(text.chars().take(200).collect())
}
