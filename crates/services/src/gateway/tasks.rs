//! The tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) for gateway clients
//! that declare it: a `tools/call` whose result does not come within `tasks.inline_wait_ms`
//! is answered with a task at once and goes on as one (`services::tasks`); `tasks/get`,
//! `tasks/cancel` and `tasks/update` answer for the tasks of the same user and assistant,
//! from the row, on any instance.
//!
//! The gateway runs every such call as its own task, whatever the upstream speaks. What
//! the server behind asks meanwhile (elicitation, sampling, roots) makes the task
//! `input_required` with the question among its `inputRequests`, for a client that
//! declared it answers such questions; `tasks/update` brings the answers back to the call.

// Sampling and roots are deprecated in 2026-07-28 but are what older servers ask for.
#![allow(deprecated)]

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities,
    CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, CreateTaskResult,
    DetailedTask, ElicitRequest, ElicitRequestParams, ElicitResult, ErrorCode, InputRequest,
    InputRequests, InputRequiredResult, InputResponses, JsonObject, ListRootsRequest,
    ListRootsResult, Task, TaskPayload, TaskStatus as WireStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::GatewayHandler;
use super::call::call_outcome;
use super::downstream::not_declared;
use crate::domain::{TaskOrigin, TaskStatus};
use crate::error::{Error, Resource};
use crate::mcp::downstream::Downstream;
use crate::services::{Caller, NewTask, Started, TaskEnd, TaskHandle};
use crate::store::StoredTask;

/// Whether the request's client declared the tasks extension (for the session or in
/// this request's metadata).
pub(super) fn declares_tasks(context: &RequestContext<RoleServer>) -> bool {
    super::client_declares(context, |capabilities| capabilities.supports_tasks())
}

fn wire_status(status: TaskStatus) -> WireStatus {
    match status {
        TaskStatus::Working => WireStatus::Working,
        TaskStatus::InputRequired => WireStatus::InputRequired,
        TaskStatus::Completed => WireStatus::Completed,
        TaskStatus::Failed => WireStatus::Failed,
        TaskStatus::Cancelled => WireStatus::Cancelled,
    }
}

fn object(value: Option<&Value>) -> JsonObject {
    match value {
        Some(Value::Object(map)) => map.clone(),
        _ => JsonObject::new(),
    }
}

/// The task's base fields as the extension names them.
fn wire_task(task: &StoredTask, handler: &GatewayHandler) -> Task {
    let tasks = handler.service.tasks();
    let mut wire = Task::new(
        task.id.to_string(),
        wire_status(task.status),
        task.created_at.to_rfc3339(),
        task.updated_at.to_rfc3339(),
    )
    .with_ttl_ms(task.ttl_ms())
    .with_poll_interval_ms(tasks.poll_interval().as_millis() as u64);
    wire.status_message = task.status_message.clone();
    wire
}

fn detailed(task: &StoredTask, handler: &GatewayHandler) -> DetailedTask {
    let payload = match task.status {
        TaskStatus::Working => TaskPayload::Working,
        TaskStatus::InputRequired => TaskPayload::InputRequired {
            input_requests: task
                .input_requests
                .clone()
                .and_then(|requests| serde_json::from_value::<InputRequests>(requests).ok())
                .unwrap_or_default(),
        },
        TaskStatus::Completed => TaskPayload::Completed {
            result: object(task.result.as_ref()),
        },
        TaskStatus::Failed => TaskPayload::Failed {
            error: object(task.error.as_ref()),
        },
        TaskStatus::Cancelled => TaskPayload::Cancelled,
    };
    DetailedTask::new(wire_task(task, handler), payload)
}

/// What the server behind asks during a task, put to the client as the task's input
/// requests, if the client declared it answers such questions.
struct TaskAsked {
    task: TaskHandle,
    client: Option<ClientCapabilities>,
}

impl TaskAsked {
    async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        request: InputRequest,
    ) -> Result<T, ErrorData> {
        let request = serde_json::to_value(request)
            .map_err(|e| ErrorData::internal_error(format!("an unwritable question: {e}"), None))?;
        let answer = self.task.ask(request).await.ok_or_else(|| {
            ErrorData::invalid_request("the task ended before the client answered", None)
        })?;
        serde_json::from_value(answer)
            .map_err(|e| ErrorData::invalid_params(format!("the client's answer: {e}"), None))
    }
}

impl Downstream for TaskAsked {
    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        Box::pin(async move {
            if self.client.as_ref().is_none_or(|c| c.elicitation.is_none()) {
                return Err(not_declared("elicitation"));
            }
            self.ask(InputRequest::Elicitation(ElicitRequest::new(params)))
                .await
        })
    }

    fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async move {
            if self.client.as_ref().is_none_or(|c| c.sampling.is_none()) {
                return Err(not_declared("sampling"));
            }
            self.ask(InputRequest::CreateMessage(CreateMessageRequest::new(
                params,
            )))
            .await
        })
    }

    fn roots(&self) -> BoxFuture<'_, Option<Result<ListRootsResult, ErrorData>>> {
        Box::pin(async move {
            if self.client.as_ref().is_none_or(|c| c.roots.is_none()) {
                return None;
            }
            Some(
                self.ask(InputRequest::ListRoots(ListRootsRequest::default()))
                    .await,
            )
        })
    }
}

/// A task the client names that is not its own (or no task at all): invalid params, as
/// the extension asks.
fn task_error(error: Error) -> ErrorData {
    match error {
        Error::NotFound(Resource::Task, id) => {
            ErrorData::invalid_params(format!("unknown task '{id}'"), None)
        }
        other => super::to_mcp_error(other),
    }
}

/// A call's outcome as a task keeps it.
fn task_end(outcome: Result<CallToolResponse, ErrorData>) -> TaskEnd {
    match outcome {
        Ok(CallToolResponse::Complete(result)) => {
            TaskEnd::Completed(serde_json::to_value(result).unwrap_or_default())
        }
        Ok(CallToolResponse::InputRequired(asked)) => {
            TaskEnd::Asked(serde_json::to_value(asked).unwrap_or_default())
        }
        Ok(_) => TaskEnd::failed(
            ErrorCode::INTERNAL_ERROR.0,
            "the server answered the call with a task of its own where none was expected",
            "MCP_PROTOCOL_ERROR",
        ),
        Err(error) => TaskEnd::Failed(serde_json::to_value(error).unwrap_or_default()),
    }
}

fn unreadable(what: &str, error: serde_json::Error) -> ErrorData {
    ErrorData::internal_error(format!("{what} was unreadable: {error}"), None)
}

impl GatewayHandler {
    /// `tools/call` of a client that declared the tasks extension.
    pub(super) async fn call_as_task(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let name = request.name.to_string();
        let app = super::app_view(&request, &context);
        let server_name = Box::pin(self.service.server_of(&principal, &name))
            .await
            .map_err(super::to_mcp_error)?;
        let tasks = self.service.tasks().clone();
        let new = NewTask {
            user: principal.user.clone(),
            assistant: Some(principal.assistant.clone()),
            origin: TaskOrigin::Gateway,
            server_name,
            tool_name: name.clone(),
        };
        let (service, max_result_bytes) = (self.service.clone(), self.max_result_bytes);
        let timeout = tasks.call_timeout();
        // A 2026-07-28 client takes its upstream's rounds itself until the call is a task
        // (the upstream may ask first and make a task of the retry).
        let relayed =
            super::relayed_round(request.input_responses, request.request_state, &context);
        let arguments = request.arguments;
        let client = context.client_capabilities();
        let start = tasks.start(new, Some(tasks.inline_wait()), move |task| {
            Box::pin(async move {
                let (live, progress) = tokio::sync::mpsc::unbounded_channel();
                let cancel = task.cancelled();
                let asked: Arc<dyn Downstream> = Arc::new(TaskAsked {
                    task: task.clone(),
                    client,
                });
                // The server making a task of the call makes ours at once: the upstream's
                // task is followed by this one, its id never shown to the client.
                let following = task.clone();
                let caller = Caller {
                    live: Some(&live),
                    downstream: Some(asked),
                    timeout: Some(timeout),
                    relayed,
                    became_task: Some(Box::new(move |upstream| following.follows(upstream))),
                    task: Some(&task),
                    ..Caller::default()
                };
                let call = service.call(
                    &principal,
                    &name,
                    arguments,
                    caller,
                    &cancel,
                    max_result_bytes,
                    app.as_deref(),
                );
                task_end(call_outcome(task.saying(call, progress).await))
            })
        });
        // The client's cancellation while it waits inline cancels the call (a task already
        // made goes on: the client cancelled a request, not the task it did not see).
        let started = tokio::select! {
            started = start => started.map_err(super::to_mcp_error)?,
            () = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("the client cancelled the call", None));
            }
        };
        match started {
            Started::Inline(TaskEnd::Completed(result)) => {
                let result: CallToolResult = serde_json::from_value(result)
                    .map_err(|error| unreadable("the call's result", error))?;
                Ok(result.into())
            }
            Started::Inline(TaskEnd::Asked(asked)) => {
                let asked: InputRequiredResult = serde_json::from_value(asked)
                    .map_err(|error| unreadable("the server's questions", error))?;
                Ok(asked.into())
            }
            Started::Inline(TaskEnd::Failed(error)) => Err(serde_json::from_value(error)
                .unwrap_or_else(|_| ErrorData::internal_error("the call failed", None))),
            Started::Task(task) => Ok(CallToolResponse::Task(CreateTaskResult::new(wire_task(
                &task, self,
            )))),
        }
    }

    pub(super) async fn task(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<DetailedTask, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let task = self
            .service
            .tasks()
            .get(&principal.user, Some(&principal.assistant), task_id)
            .await
            .map_err(task_error)?;
        Ok(detailed(&task, self))
    }

    /// `tasks/update`: the client's answers to what the task waits for.
    pub(super) async fn answer(
        &self,
        task_id: &str,
        responses: InputResponses,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = self.principal(&context.extensions)?;
        self.service
            .tasks()
            .answer(
                &principal.user,
                Some(&principal.assistant),
                task_id,
                responses.into_iter().collect(),
            )
            .await
            .map_err(task_error)
    }

    pub(super) async fn cancel(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = self.principal(&context.extensions)?;
        self.service
            .tasks()
            .cancel(&principal.user, Some(&principal.assistant), task_id)
            .await
            .map_err(task_error)?;
        Ok(())
    }
}
