//! Using a server: `/api/mcp-servers/{id}/connect|tools|resources|prompts` and seed 000's
//! `/api/mcp/servers/{id}/health`.

use std::convert::Infallible;

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, LOCATION};
use axum::http::{HeaderName, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rmcp::model::JsonObject;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::task::AbortOnDropHandle;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// `Prefer` (RFC 7240); the `http` crate names no constant for it.
const PREFER: HeaderName = HeaderName::from_static("prefer");

use super::AppState;
use super::auth::UserContext;
use super::connections::ConnectionView;
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::domain::CallVia;
use crate::domain::tool_name::display_name;
use crate::error::Error;
use crate::services::tasks::task_json;
use crate::services::{Caller, ToolCallReport};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(connect))
        .routes(routes!(tools))
        .routes(routes!(call_tool))
        .routes(routes!(resources))
        .routes(routes!(read_resource))
        .routes(routes!(prompts))
        .routes(routes!(get_prompt))
        .routes(routes!(health))
}

fn millis(duration: std::time::Duration) -> f64 {
    (duration.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

/// Connects now (or reuses the live connection) and lists the tools:
/// `{status, serverInfo, protocolVersion, toolCount, latencyMs}`.
#[utoipa::path(post, path = "/api/mcp-servers/{id}/connect", tag = "upstream",
    params(("id" = String, Path, description = "The server's id")), responses((status = OK, body = Value)))]
async fn connect(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let report = state
        .services
        .upstream
        .test_connection(&ctx.user, &id, ctx.origin(CallVia::Rest))
        .await?;
    Ok(JsonResponse(json!({
        "status": "connected",
        "serverInfo": {"name": report.server_name, "version": report.server_version},
        "protocolVersion": report.protocol_version,
        "toolCount": report.tool_count,
        "latencyMs": millis(report.latency),
    })))
}

/// A tool as its server declared it (every field, in its order), with the user's settings.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolView<'a> {
    #[serde(flatten)]
    declared: &'a rmcp::model::Tool,
    display_name: String,
    is_enabled: bool,
    is_auto_approve: bool,
}

/// The server's tools with the user's settings: `{serverId, serverName, tools}` (cached 5 min).
#[utoipa::path(get, path = "/api/mcp-servers/{id}/tools", tag = "upstream",
    params(("id" = String, Path, description = "The server's id")), responses((status = OK, body = Value)))]
async fn tools(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let (runtime, catalog) = state.services.upstream.tools(&ctx.user, &id).await?;
    let spec = &runtime.server.spec;
    let tools: Vec<ToolView> = catalog
        .tools
        .iter()
        .map(|tool| ToolView {
            declared: tool,
            display_name: display_name(spec.name.as_str(), &tool.name),
            is_enabled: !spec.disabled_tools.iter().any(|t| *t == tool.name),
            is_auto_approve: spec.auto_approve_tools.iter().any(|t| *t == tool.name),
        })
        .collect();
    Ok(JsonResponse(json!({
        "serverId": runtime.server.id,
        "serverName": spec.name.as_str(),
        "tools": tools,
    })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CallRequest {
    /// Checked against the tool's `inputSchema` before the call.
    #[serde(default)]
    #[schema(value_type = Object)]
    arguments: Value,
    /// MCP Apps: the call is a server's view's, relayed by its host; the view's `ui://`
    /// resource. Only that server's tools visible to apps can be called so.
    app: Option<AppCaller>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AppCaller {
    resource_uri: String,
}

/// Calls one tool at once (no approval): the MCP result (`content`, `structuredContent`,
/// `isError`) plus `progress` and `latencyMs`. With `Accept: text/event-stream` the answer
/// is a stream instead: a `progress` event (`{progress, total, message}`) for each
/// notification as it arrives, then one `result` (the same body) or `error` (the error
/// body). With `Prefer: respond-async` the call runs as a task: 202 with the task
/// (`GET /api/tasks/{id}`), `Location` naming it.
#[utoipa::path(post, path = "/api/mcp-servers/{id}/tools/{tool}/call", tag = "upstream",
    params(("id" = String, Path, description = "The server's id"), ("tool" = String, Path, description = "The tool's name on that server")),
    request_body = CallRequest, responses((status = OK, body = Value), (status = ACCEPTED, body = Value, description = "Started as a task (Prefer: respond-async)")))]
async fn call_tool(
    State(state): State<AppState>,
    ctx: UserContext,
    headers: HeaderMap,
    Path((id, tool)): Path<(String, String)>,
    Json(body): Json<CallRequest>,
) -> Result<Response, ApiError> {
    let mut origin = ctx.origin(CallVia::Rest);
    if let Some(app) = &body.app {
        state
            .services
            .upstream
            .check_view(&ctx.user, &id, &app.resource_uri)
            .await?;
        origin = origin.from_app();
    }
    if prefers_async(&headers) {
        let tasks = &state.services.tasks;
        let task = state
            .services
            .upstream
            .call_tool_as_task(tasks, &ctx.user, &id, &tool, body.arguments, origin)
            .await?;
        let location = format!("/api/tasks/{}", task.id);
        return Ok((
            StatusCode::ACCEPTED,
            [
                (LOCATION, location),
                (
                    HeaderName::from_static("preference-applied"),
                    "respond-async".to_owned(),
                ),
            ],
            JsonResponse(task_json(&task, tasks.poll_interval())),
        )
            .into_response());
    }
    let streamed = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !streamed {
        let report = state
            .services
            .upstream
            .call_tool(&ctx.user, &id, &tool, body.arguments, None, origin)
            .await?;
        return Ok(JsonResponse(call_body(&report)).into_response());
    }
    let (progress_tx, progress_rx) = tokio::sync::mpsc::unbounded_channel();
    // The call runs in its own task so progress can be sent while it runs; a client that
    // goes away drops the stream, whose last part holds the task's handle: it is aborted.
    let call = AbortOnDropHandle::new(tokio::spawn(async move {
        let caller = Caller {
            live: Some(&progress_tx),
            origin,
            ..Caller::default()
        };
        state
            .services
            .upstream
            .call_tool_reporting(&ctx.user, &id, &tool, body.arguments, caller)
            .await
    }));
    let progress = UnboundedReceiverStream::new(progress_rx).map(|p| {
        Event::default()
            .event("progress")
            .data(progress_json(&p).to_string())
    });
    let end = futures::stream::once(async move {
        match call.await {
            Ok(Ok(report)) => Event::default()
                .event("result")
                .data(call_body(&report).to_string()),
            Ok(Err(error)) => error_event(ApiError::from(error)).await,
            Err(_) => error_event(ApiError::Panic).await,
        }
    });
    let events = progress.chain(end).map(Ok::<_, Infallible>);
    Ok(Sse::new(events).into_response())
}

/// `Prefer: respond-async` (RFC 7240), among the header's preferences.
fn prefers_async(headers: &HeaderMap) -> bool {
    headers.get_all(PREFER).iter().any(|value| {
        value.to_str().is_ok_and(|value| {
            value
                .split(',')
                .any(|preference| preference.trim().eq_ignore_ascii_case("respond-async"))
        })
    })
}

/// A progress notification as the answer shows it.
fn progress_json(p: &crate::mcp::Progress) -> Value {
    json!({"progress": p.progress, "total": p.total, "message": p.message})
}

/// The error as the JSON answer would carry it (`{"error":{"code","message",…}}`).
async fn error_event(error: ApiError) -> Event {
    let body = axum::body::to_bytes(error.into_response().into_body(), 1 << 16)
        .await
        .unwrap_or_default();
    Event::default()
        .event("error")
        .data(String::from_utf8_lossy(&body))
}

/// The JSON body of a call's answer.
fn call_body(report: &ToolCallReport) -> Value {
    let is_error = report.outcome.result.is_error.unwrap_or(false);
    let mut body = serde_json::to_value(&report.outcome.result).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut body {
        map.insert("isError".into(), Value::Bool(is_error));
        map.insert(
            "progress".into(),
            Value::Array(report.outcome.progress.iter().map(progress_json).collect()),
        );
        map.insert("latencyMs".into(), json!(millis(report.latency)));
        // MCP Apps: the view that renders this result.
        if let Some(view) = &report.view {
            map.insert("ui".into(), json!({"resourceUri": view}));
        }
    }
    body
}

/// `{resources, resourceTemplates}`.
#[utoipa::path(get, path = "/api/mcp-servers/{id}/resources", tag = "upstream",
    params(("id" = String, Path, description = "The server's id")), responses((status = OK, body = Value)))]
async fn resources(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let catalog = state.services.upstream.resources(&ctx.user, &id).await?;
    Ok(JsonResponse(json!({
        "resources": catalog.resources,
        "resourceTemplates": catalog.templates,
    })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReadRequest {
    #[schema(min_length = 1, max_length = 4096)]
    uri: String,
}

/// Reads one resource: `{contents}`.
#[utoipa::path(post, path = "/api/mcp-servers/{id}/resources/read", tag = "upstream",
    params(("id" = String, Path, description = "The server's id")), request_body = ReadRequest, responses((status = OK, body = Value)))]
async fn read_resource(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(body): Json<ReadRequest>,
) -> Result<JsonResponse<Value>, ApiError> {
    let result = state
        .services
        .upstream
        .read_resource(&ctx.user, &id, &body.uri)
        .await?;
    Ok(JsonResponse(
        serde_json::to_value(result).unwrap_or_default(),
    ))
}

/// `{prompts}`.
#[utoipa::path(get, path = "/api/mcp-servers/{id}/prompts", tag = "upstream",
    params(("id" = String, Path, description = "The server's id")), responses((status = OK, body = Value)))]
async fn prompts(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let prompts = state.services.upstream.prompts(&ctx.user, &id).await?;
    Ok(JsonResponse(json!({ "prompts": *prompts })))
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
struct PromptRequest {
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    arguments: Option<JsonObject>,
}

/// Gets one prompt: `{description, messages}`.
#[utoipa::path(post, path = "/api/mcp-servers/{id}/prompts/{name}", tag = "upstream",
    params(("id" = String, Path, description = "The server's id"), ("name" = String, Path, description = "The prompt's name")),
    request_body = PromptRequest, responses((status = OK, body = Value)))]
async fn get_prompt(
    State(state): State<AppState>,
    ctx: UserContext,
    Path((id, name)): Path<(String, String)>,
    Json(body): Json<PromptRequest>,
) -> Result<JsonResponse<Value>, ApiError> {
    let result = state
        .services
        .upstream
        .get_prompt(&ctx.user, &id, &name, body.arguments)
        .await?;
    Ok(JsonResponse(
        serde_json::to_value(result).unwrap_or_default(),
    ))
}

/// Seed 000's health check: a ping through the pool,
/// `{status: healthy|unhealthy, latencyMs, connection, error}`.
#[utoipa::path(get, path = "/api/mcp/servers/{id}/health", tag = "upstream",
    params(("id" = String, Path, description = "The server's id")), responses((status = OK, body = Value)))]
async fn health(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let report = state.services.upstream.health(&ctx.user, &id).await?;
    let error = report.error.as_ref().map(Error::summary);
    Ok(JsonResponse(json!({
        "serverId": id,
        "status": if report.healthy { "healthy" } else { "unhealthy" },
        "latencyMs": millis(report.latency),
        "connection": report.connection.map(ConnectionView::from),
        "error": error,
        "checkedAt": crate::domain::now(),
    })))
}
