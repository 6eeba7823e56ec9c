//! The gRPC interface (`proto/mcp_pool/v1/pool.proto`, service `mcppool.v1.McpPool`) for
//! backends that prefer it to REST: served by tonic on its own port from the same
//! process, over the same services (actors, confirmation rules, limits) and keys.
//!
//! Only this module knows tonic; `grpc/status.rs` maps errors to statuses, in one place.

mod status;

use std::pin::Pin;

use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::app::Services;
use crate::domain::{AssistantId, CallOrigin, CallVia, UserId};
use crate::error::Error;
use crate::security::bearer_token;
use crate::services::{ModelToolCall, Principal};
pub use status::ERROR_CODE_KEY;

/// The generated messages, server and client.
pub mod proto {
    tonic::include_proto!("mcppool.v1");
}

use proto::mcp_pool_server::{McpPool, McpPoolServer};

/// The service behind the generated server trait.
#[derive(Clone)]
pub struct GrpcApi {
    services: Services,
    /// Ends the update streams when the service stops.
    shutdown: CancellationToken,
}

/// Serves the gRPC interface on `listener` until `shutdown` is cancelled; update streams
/// end with it.
pub async fn serve(
    listener: tokio::net::TcpListener,
    services: Services,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(server(services, shutdown.clone()))
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY small responses wait on delayed ACKs (~40 ms).
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.cancelled_owned(),
        )
        .await
}

pub fn server(services: Services, shutdown: CancellationToken) -> McpPoolServer<GrpcApi> {
    McpPoolServer::new(GrpcApi { services, shutdown })
}

const USER_ID_KEY: &str = "x-user-id";

impl GrpcApi {
    /// `authorization: Bearer <key>` (service or admin) and `x-user-id`, as for REST.
    async fn user<T>(&self, request: &Request<T>) -> Result<UserId, Status> {
        Ok(self.caller(request).await?.0)
    }

    /// The user a request acts for and the key acting (an admin's decisions are audited).
    async fn caller<T>(&self, request: &Request<T>) -> Result<(UserId, Principal), Status> {
        let metadata = request.metadata();
        let token = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .ok_or_else(|| {
                status::from_error(&Error::Unauthorized(
                    "missing metadata authorization: Bearer <key>".into(),
                ))
            })?;
        // Service and admin keys may both act for a user, as on `/api/*`.
        let principal = self
            .services
            .keys
            .authenticate(token)
            .await
            .map_err(|e| status::from_error(&e))?;
        let user = metadata
            .get(USER_ID_KEY)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| status::from_error(&Error::validation("missing metadata x-user-id")))?;
        let user = UserId::parse(user).map_err(|e| status::from_error(&e.into()))?;
        Ok((user, principal))
    }
}

fn json_text(value: &Value) -> String {
    if value.is_null() {
        String::new()
    } else {
        value.to_string()
    }
}

fn record(record: &crate::domain::ToolCallRecord) -> proto::ToolCallRecord {
    proto::ToolCallRecord {
        id: record.id.clone(),
        status: record.status.as_str().to_owned(),
        display_name: record.display_name.clone(),
        server_id: record
            .server_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
        server_name: record.server_name.clone().unwrap_or_default(),
        tool_name: record.tool_name.clone().unwrap_or_default(),
        arguments_json: json_text(&record.arguments),
        response_json: json_text(&record.response),
        is_error: record.is_error,
    }
}

fn task_view(task: &crate::store::StoredTask, poll_interval: std::time::Duration) -> proto::Task {
    let json = |value: &Option<Value>| value.as_ref().map(json_text).unwrap_or_default();
    proto::Task {
        task_id: task.id.to_string(),
        status: task.status.as_str().to_owned(),
        status_message: task.status_message.clone().unwrap_or_default(),
        server_name: task.server_name.clone(),
        tool_name: task.tool_name.clone(),
        origin: task.origin.as_str().to_owned(),
        created_at: task.created_at.to_rfc3339(),
        last_updated_at: task.updated_at.to_rfc3339(),
        ttl_ms: task.ttl_ms(),
        poll_interval_ms: poll_interval.as_millis() as u64,
        result_json: json(&task.result),
        error_json: json(&task.error),
    }
}

/// One tool of a server, under the name the caller uses for it.
fn tool_view(
    server: &crate::domain::McpServer,
    tool: &rmcp::model::Tool,
    display_name: String,
) -> proto::Tool {
    proto::Tool {
        server_id: server.id.to_string(),
        server_name: server.spec.name.as_str().to_owned(),
        tool_name: tool.name.to_string(),
        display_name,
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        input_schema_json: Value::Object((*tool.input_schema).clone()).to_string(),
    }
}

fn unavailable(server_id: uuid::Uuid, error: &Error) -> proto::UnavailableServer {
    proto::UnavailableServer {
        server_id: server_id.to_string(),
        error_code: error.code().to_owned(),
        error_message: error.to_string(),
    }
}

/// `arguments_json` as a JSON value ({} when empty).
fn arguments(text: &str) -> Result<Value, Status> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text).map_err(|e| {
        status::from_error(&Error::validation(format!(
            "arguments_json is not JSON: {e}"
        )))
    })
}

type UpdateStream = Pin<Box<dyn Stream<Item = Result<proto::ToolCallUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl McpPool for GrpcApi {
    async fn get_tools(
        &self,
        request: Request<proto::GetToolsRequest>,
    ) -> Result<Response<proto::GetToolsResponse>, Status> {
        let user = self.user(&request).await?;
        let assistant = request.into_inner().assistant_id;
        let upstream = &self.services.upstream;
        let mut response = proto::GetToolsResponse::default();
        if assistant.is_empty() {
            let servers = self
                .services
                .servers
                .list(&user)
                .await
                .map_err(|e| status::from_error(&e))?;
            let active: Vec<_> = servers.iter().filter(|s| s.spec.is_active).collect();
            let ids: Vec<String> = active.iter().map(|s| s.id.to_string()).collect();
            let listings =
                futures::future::join_all(ids.iter().map(|id| upstream.tools(&user, id))).await;
            for (server, listing) in active.into_iter().zip(listings) {
                match listing {
                    Ok((_, catalog)) => response.tools.extend(
                        catalog
                            .tools
                            .iter()
                            .map(|tool| tool_view(server, tool, tool.name.to_string())),
                    ),
                    Err(error) => response.unavailable.push(unavailable(server.id, &error)),
                }
            }
        } else {
            let assistant =
                AssistantId::parse(&assistant).map_err(|e| status::from_error(&e.into()))?;
            let listing = upstream
                .assistant_tools(&user, &assistant)
                .await
                .map_err(|e| status::from_error(&e))?;
            response.tools = listing
                .tools
                .iter()
                .map(|tool| tool_view(&tool.server.server, &tool.tool, tool.name.clone()))
                .collect();
            response.unavailable = listing
                .unavailable
                .iter()
                .map(|u| unavailable(u.server_id, &u.error))
                .collect();
        }
        Ok(Response::new(response))
    }

    async fn call_tool(
        &self,
        request: Request<proto::CallToolRequest>,
    ) -> Result<Response<proto::CallToolResponse>, Status> {
        let (user, principal) = self.caller(&request).await?;
        let who = CallOrigin::new(CallVia::Grpc)
            .with_key(principal.key_id, principal.admin_key().is_some());
        let call = request.into_inner();
        let arguments = arguments(&call.arguments_json)?;
        if call.message_id.is_empty() && call.as_task {
            let tasks = &self.services.tasks;
            let task = self
                .services
                .upstream
                .call_tool_as_task(
                    tasks,
                    &user,
                    &call.server_id,
                    &call.tool_name,
                    arguments,
                    who,
                )
                .await
                .map_err(|e| status::from_error(&e))?;
            return Ok(Response::new(proto::CallToolResponse {
                success: true,
                result_json: String::new(),
                record: None,
                task: Some(task_view(&task, tasks.poll_interval())),
            }));
        }
        if call.message_id.is_empty() {
            let report = self
                .services
                .upstream
                .call_tool(
                    &user,
                    &call.server_id,
                    &call.tool_name,
                    arguments,
                    None,
                    who,
                )
                .await
                .map_err(|e| status::from_error(&e))?;
            let result = &report.outcome.result;
            return Ok(Response::new(proto::CallToolResponse {
                success: !result.is_error.unwrap_or(false),
                result_json: serde_json::to_string(result).unwrap_or_default(),
                record: None,
                task: None,
            }));
        }
        let assistant = AssistantId::parse(&call.assistant_id).map_err(|_| {
            status::from_error(&Error::validation(
                "assistant_id is required with message_id",
            ))
        })?;
        let records = self
            .services
            .tool_calls
            .submit(
                &user,
                &call.message_id,
                &assistant,
                None,
                vec![ModelToolCall {
                    id: call.tool_call_id.clone(),
                    name: call.tool_name,
                    arguments,
                }],
                who,
            )
            .await
            .map_err(|e| status::from_error(&e))?;
        let submitted = records
            .iter()
            .find(|r| r.id == call.tool_call_id)
            .map(record);
        Ok(Response::new(proto::CallToolResponse {
            success: submitted.as_ref().is_some_and(|r| !r.is_error),
            result_json: String::new(),
            record: submitted,
            task: None,
        }))
    }

    async fn get_task(
        &self,
        request: Request<proto::GetTaskRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let user = self.user(&request).await?;
        let tasks = &self.services.tasks;
        let task = tasks
            .get(&user, None, &request.into_inner().task_id)
            .await
            .map_err(|e| status::from_error(&e))?;
        Ok(Response::new(task_view(&task, tasks.poll_interval())))
    }

    async fn cancel_task(
        &self,
        request: Request<proto::CancelTaskRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let user = self.user(&request).await?;
        let tasks = &self.services.tasks;
        let task = tasks
            .cancel(&user, None, &request.into_inner().task_id)
            .await
            .map_err(|e| status::from_error(&e))?;
        Ok(Response::new(task_view(&task, tasks.poll_interval())))
    }

    type StreamToolCallUpdatesStream = UpdateStream;

    async fn stream_tool_call_updates(
        &self,
        request: Request<proto::StreamToolCallUpdatesRequest>,
    ) -> Result<Response<Self::StreamToolCallUpdatesStream>, Status> {
        let user = self.user(&request).await?;
        let (_, live) = self.services.events.subscribe(&user, None);
        let updates =
            tokio_stream::wrappers::BroadcastStream::new(live).filter_map(|event| async move {
                let event = event.ok()?;
                if event.name != crate::confirm::TOOL_CALL_EVENT {
                    return None;
                }
                let record: crate::domain::ToolCallRecord =
                    serde_json::from_value(event.data["toolCall"].clone()).ok()?;
                Some(Ok(proto::ToolCallUpdate {
                    event_id: event.id,
                    message_id: event.data["messageId"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    record: Some(self::record(&record)),
                }))
            });
        let stop = self.shutdown.clone();
        Ok(Response::new(Box::pin(
            updates.take_until(async move { stop.cancelled_owned().await }),
        )))
    }

    async fn confirm(
        &self,
        request: Request<proto::ConfirmRequest>,
    ) -> Result<Response<proto::ConfirmResponse>, Status> {
        let (user, principal) = self.caller(&request).await?;
        let confirm = request.into_inner();
        let decided = self
            .services
            .tool_calls
            .confirm(
                &user,
                &confirm.message_id,
                &confirm.tool_call_id,
                confirm.approved,
                principal.admin_key(),
            )
            .await
            .map_err(|e| status::from_error(&e))?;
        Ok(Response::new(proto::ConfirmResponse {
            record: Some(record(&decided)),
        }))
    }

    async fn answer_elicitation(
        &self,
        request: Request<proto::AnswerElicitationRequest>,
    ) -> Result<Response<proto::AnswerElicitationResponse>, Status> {
        let user = self.user(&request).await?;
        let answer = request.into_inner();
        let content = match answer.content_json.trim() {
            "" => None,
            json => Some(serde_json::from_str(json).map_err(|e| {
                status::from_error(&Error::validation(format!("content_json: {e}")))
            })?),
        };
        self.services
            .elicitations
            .answer_as_sent(&user, &answer.id, &answer.action, content)
            .await
            .map_err(|e| status::from_error(&e))?;
        Ok(Response::new(proto::AnswerElicitationResponse {}))
    }

    async fn decide_sampling(
        &self,
        request: Request<proto::DecideSamplingRequest>,
    ) -> Result<Response<proto::DecideSamplingResponse>, Status> {
        let user = self.user(&request).await?;
        let decision = request.into_inner();
        self.services
            .sampling
            .answer(&user, &decision.id, &decision.action)
            .await
            .map_err(|e| status::from_error(&e))?;
        Ok(Response::new(proto::DecideSamplingResponse {}))
    }

    async fn health(
        &self,
        _request: Request<proto::HealthRequest>,
    ) -> Result<Response<proto::HealthResponse>, Status> {
        let services = &self.services;
        let status = match services.store.ready(services.cluster.me()).await {
            Ok(()) => "SERVING",
            Err(_) => "NOT_SERVING",
        };
        Ok(Response::new(proto::HealthResponse {
            status: status.into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }))
    }
}
