//! The gateway over HTTP: `/mcp/assistants/{id}` (streamable HTTP, rmcp's server behind a
//! token check) and the assistant's gateway tokens under `/api/assistants/{id}/`.

use std::sync::Arc;

use super::auth::AdminContext;
use crate::gateway::xiaozhi::{BridgeStatus, redacted};
use crate::store::XiaozhiBridge;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json as JsonResponse, Router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::auth::{UserContext, gateway_principal};
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::domain::AssistantId;
use crate::gateway::GatewayHandler;
use crate::store::GatewayToken;

pub const GATEWAY_PATH: &str = "/mcp/assistants/{id}";

pub fn routes(state: &AppState) -> Router<AppState> {
    let settings = &state.settings;
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = state.shutdown.child_token();
    config = if settings.gateway.allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(settings.gateway.allowed_hosts.clone())
    };
    let gateway = state.services.gateway.clone();
    let max_result_bytes = settings.limits.max_result_bytes;
    let mcp = StreamableHttpService::new(
        move || Ok(GatewayHandler::new(gateway.clone(), None, max_result_bytes)),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(GATEWAY_PATH, mcp)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .route(
            "/api/assistants/{id}/gateway-tokens",
            get(list_tokens).post(create_token),
        )
        .route(
            "/api/assistants/{id}/gateway-tokens/{token}",
            delete(delete_token),
        )
        .route(
            "/api/assistants/{id}/xiaozhi",
            get(read_bridge).put(put_bridge).delete(delete_bridge),
        )
        .route("/admin/xiaozhi", get(bridge_statuses))
        .route("/admin/global-servers", get(global_servers))
}

/// Lets a request through to the MCP service only with a token of the assistant in the
/// path, and hands the principal on in the request's extensions.
async fn authenticate(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let assistant = request
        .uri()
        .path()
        .strip_prefix("/mcp/assistants/")
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_owned();
    let (mut parts, body) = request.into_parts();
    let principal = gateway_principal(&parts, &state, &assistant).await?;
    parts.extensions.insert(principal);
    Ok(next.run(Request::from_parts(parts, body)).await)
}

fn token_view(token: &GatewayToken) -> Value {
    json!({
        "id": token.id,
        "assistantId": token.assistant_id.as_str(),
        "name": token.name,
        "prefix": token.prefix,
        "createdAt": token.created_at,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateToken {
    name: String,
}

async fn create_token(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(body): Json<CreateToken>,
) -> Result<Response, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let (token, secret) = state
        .services
        .gateway
        .create_token(&ctx.user, &assistant, &body.name)
        .await?;
    let mut view = token_view(&token);
    view["token"] = json!(secret);
    view["endpoint"] = json!(format!("/mcp/assistants/{}", assistant.as_str()));
    Ok((StatusCode::CREATED, JsonResponse(view)).into_response())
}

async fn list_tokens(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let tokens = state.services.gateway.tokens(&ctx.user, &assistant).await?;
    Ok(JsonResponse(
        json!({"tokens": tokens.iter().map(token_view).collect::<Vec<_>>()}),
    ))
}

async fn delete_token(
    State(state): State<AppState>,
    ctx: UserContext,
    Path((id, token)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    state
        .services
        .gateway
        .delete_token(&ctx.user, &assistant, &token)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBridge {
    /// `wss://…?token=…`, as the voice platform gives it.
    endpoint: String,
    enabled: Option<bool>,
}

fn bridge_view(bridge: &XiaozhiBridge, status: &BridgeStatus) -> Value {
    json!({
        "assistantId": bridge.assistant_id.as_str(),
        "endpoint": redacted(&bridge.endpoint),
        "enabled": bridge.enabled,
        "status": status,
        "createdAt": bridge.created_at,
        "updatedAt": bridge.updated_at,
    })
}

async fn put_bridge(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(body): Json<PutBridge>,
) -> Result<JsonResponse<Value>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let bridges = &state.services.xiaozhi;
    bridges
        .put(
            &ctx.user,
            &assistant,
            &body.endpoint,
            body.enabled.unwrap_or(true),
        )
        .await?;
    let (bridge, status) = bridges.get(&ctx.user, &assistant).await?;
    Ok(JsonResponse(bridge_view(&bridge, &status)))
}

async fn read_bridge(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let (bridge, status) = state.services.xiaozhi.get(&ctx.user, &assistant).await?;
    Ok(JsonResponse(bridge_view(&bridge, &status)))
}

async fn delete_bridge(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    state.services.xiaozhi.delete(&ctx.user, &assistant).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn bridge_statuses(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> JsonResponse<Value> {
    JsonResponse(json!({"bridges": state.services.xiaozhi.statuses()}))
}

async fn global_servers(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> JsonResponse<crate::services::global_servers::GlobalStatus> {
    JsonResponse(state.services.upstream.globals().status())
}
