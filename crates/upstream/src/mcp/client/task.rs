//! A task a server made of a call (the tasks extension, SEP-2663): the pool declares the
//! extension to a server that offers it, for callers that can wait for a task (every one
//! but a gateway client that did not declare it), and follows the task to its end, so a
//! tool the server runs only as a task works from REST, the agent loop, gRPC and the
//! gateway alike, and a long one holds no request open on the server.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolResult, CancelTaskParams, CancelTaskRequest, ClientCapabilities, ClientRequest,
    GetTaskParams, GetTaskRequest, InputRequests, InputResponses, JsonObject, RequestMetaObject,
    ServerResult, TASKS_EXTENSION_ID, Task, TaskPayload, UpdateTaskParams, UpdateTaskRequest,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{ClientHandler, Peer, RoleClient};

use super::{McpClient, Progress};
use crate::mcp::McpError;
use crate::mcp::downstream::Downstream;

/// Bounds on the polling interval a server suggests: not faster than this service wants to
/// ask, nor so slow that a finished task waits long to be seen.
const FASTEST_POLL: Duration = Duration::from_millis(50);
const SLOWEST_POLL: Duration = Duration::from_secs(5);

fn poll_interval(suggested_ms: Option<u64>) -> Duration {
    suggested_ms
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(1))
        .clamp(FASTEST_POLL, SLOWEST_POLL)
}

/// Cancels the server's task when its follower goes away first (the caller cancelled, the
/// call timed out): a task left running on the server would go on for nobody.
struct CancelTaskOnDrop {
    peer: Option<Peer<RoleClient>>,
    task_id: String,
    meta: RequestMetaObject,
}

impl Drop for CancelTaskOnDrop {
    fn drop(&mut self) {
        // A connection already closed (the service stopping) cancels nothing: the task
        // goes on on the server, and the instance that follows it on finds it there.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if let Some(peer) = self.peer.take().filter(|peer| !peer.is_transport_closed()) {
            let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
                CancelTaskParams::new(std::mem::take(&mut self.task_id)),
            ));
            let options = PeerRequestOptions::with_timeout(Duration::from_secs(10))
                .with_meta(std::mem::take(&mut self.meta));
            runtime.spawn(async move {
                if let Ok(handle) = peer.send_request_with_option(request, options).await {
                    let _ = handle.await_response().await;
                }
            });
        }
    }
}

impl McpClient {
    /// The server offers the tasks extension.
    pub(super) fn offers_tasks(&self) -> bool {
        self.service
            .peer()
            .peer_info()
            .is_some_and(|info| info.capabilities.supports_tasks())
    }

    /// Request metadata naming the pool's capabilities with the tasks extension declared.
    pub(super) fn meta_declaring_tasks(&self) -> RequestMetaObject {
        let mut capabilities: ClientCapabilities = self.service.service().get_info().capabilities;
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
        let mut meta = RequestMetaObject::default();
        meta.set_client_capabilities(capabilities);
        meta
    }

    /// Follows on a task this server made of an earlier call, by its id (the instance that
    /// followed it stopped): as [`Self::follow_task`], each request bounded by `timeout`,
    /// the whole too.
    pub async fn follow_task_again(
        &self,
        task_id: &str,
        timeout: Duration,
        live: Option<&tokio::sync::mpsc::UnboundedSender<Progress>>,
        asker: Option<Arc<dyn Downstream>>,
    ) -> Result<CallToolResult, McpError> {
        let _caller = self.service.service().callers.enter(asker.clone());
        let now = chrono::Utc::now().to_rfc3339();
        let task = Task::new(task_id, rmcp::model::TaskStatus::Working, now.clone(), now);
        let mut progress = Vec::new();
        self.follow_task(
            task,
            self.meta_declaring_tasks(),
            (timeout.min(Duration::from_secs(60)), timeout),
            live,
            asker,
            &mut progress,
        )
        .await
    }

    /// Follows `task` to its end: `tasks/get` at the interval the server suggests, each
    /// `tasks/get` bounded by `timeout`, the whole by `max_total`; what the task asks is
    /// answered as a round's questions are (the call's caller, else its user) and sent
    /// back with `tasks/update`; a new status message is reported as progress. Each of
    /// these requests declares the extension as the call did (`meta`): a server answers
    /// the tasks methods only to a client that declares it.
    pub(super) async fn follow_task(
        &self,
        task: Task,
        meta: RequestMetaObject,
        (timeout, max_total): (Duration, Duration),
        live: Option<&tokio::sync::mpsc::UnboundedSender<Progress>>,
        asker: Option<Arc<dyn Downstream>>,
        progress: &mut Vec<Progress>,
    ) -> Result<CallToolResult, McpError> {
        let peer = self.service.peer().clone();
        let task_id = task.task_id;
        let mut guard = CancelTaskOnDrop {
            peer: Some(peer.clone()),
            task_id: task_id.clone(),
            meta: meta.clone(),
        };
        let ask = |request: ClientRequest| {
            let options = PeerRequestOptions::with_timeout(timeout).with_meta(meta.clone());
            self.request_with(request, options)
        };
        let deadline = tokio::time::Instant::now() + max_total.max(timeout);
        let mut interval = poll_interval(task.poll_interval_ms);
        let mut message = task.status_message;
        let mut asked = HashSet::new();
        let mut wait = Duration::ZERO;
        loop {
            if tokio::time::Instant::now() + wait >= deadline {
                return Err(McpError::Timeout(max_total));
            }
            tokio::time::sleep(wait).await;
            wait = interval;
            let got = match ask(ClientRequest::GetTaskRequest(GetTaskRequest::new(
                GetTaskParams::new(&task_id),
            )))
            .await?
            {
                ServerResult::GetTaskResult(got) => got,
                other => return Err(super::unexpected(&other)),
            };
            let (state, payload) = (got.task.task, got.task.payload);
            if let Some(ms) = state.poll_interval_ms {
                interval = poll_interval(Some(ms));
            }
            if state.status_message.is_some() && state.status_message != message {
                message = state.status_message;
                let update = Progress {
                    progress: progress.len() as f64 + 1.0,
                    total: None,
                    message: message.clone(),
                };
                if let Some(live) = live {
                    let _ = live.send(update.clone());
                }
                progress.push(update);
            }
            match payload {
                TaskPayload::Working => {}
                TaskPayload::InputRequired { input_requests } => {
                    let fresh: InputRequests = input_requests
                        .into_iter()
                        .filter(|(key, _)| !asked.contains(key))
                        .collect();
                    if fresh.is_empty() {
                        continue;
                    }
                    asked.extend(fresh.keys().cloned());
                    // Each at once: a question may wait on a person while another is
                    // answered.
                    let handler = self.service.service();
                    let answers =
                        futures::future::join_all(fresh.into_iter().map(|(key, request)| {
                            let asker = asker.clone();
                            async move { (key, handler.answer_input(asker, request).await) }
                        }))
                        .await;
                    let mut responses = InputResponses::new();
                    for (key, answer) in answers {
                        // A question nobody could answer fails the call, as a refused
                        // server-to-client request would fail the server's.
                        responses.insert(key, answer.map_err(remote)?);
                    }
                    let update = UpdateTaskParams::new(&task_id, responses);
                    ask(ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(
                        update,
                    )))
                    .await?;
                    // The answers may end the wait at once: look again now.
                    wait = Duration::ZERO;
                }
                TaskPayload::Completed { result } => {
                    guard.peer = None;
                    let mut result: CallToolResult =
                        serde_json::from_value(serde_json::Value::Object(result)).map_err(|e| {
                            McpError::Protocol(format!("the task's result is not a tool's: {e}"))
                        })?;
                    // As a call answered at once reads: the envelope's type is for the
                    // gateway to set per client.
                    result.result_type = None;
                    return Ok(result);
                }
                TaskPayload::Failed { error } => {
                    guard.peer = None;
                    let field = |name: &str| error.get(name).cloned();
                    return Err(McpError::Remote {
                        code: field("code")
                            .and_then(|c| c.as_i64())
                            .map_or(-32603, |c| c as i32),
                        message: field("message")
                            .and_then(|m| m.as_str().map(str::to_owned))
                            .unwrap_or_else(|| "the server's task failed".to_owned()),
                        data: field("data"),
                    });
                }
                TaskPayload::Cancelled => {
                    guard.peer = None;
                    return Err(McpError::Protocol(
                        "the server cancelled the task it made of the call".to_owned(),
                    ));
                }
                // A status this service does not know yet: keep polling until it ends.
                _ => {}
            }
        }
    }
}

/// A question's refusal, as the call's error.
fn remote(error: rmcp::ErrorData) -> McpError {
    McpError::Remote {
        code: error.code.0,
        message: error.message.into_owned(),
        data: error.data,
    }
}
