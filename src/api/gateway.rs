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
use axum::{Json as JsonResponse, Router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{UserContext, gateway_principal};
use super::error::ApiError;
use super::external_id::ExternalId;
use super::extract::{Json, Path};
use crate::domain::AssistantId;
use crate::gateway::GatewayHandler;
use crate::store::GatewayToken;

pub const GATEWAY_PATH: &str = "/mcp/assistants/{id}";

/// The MCP endpoint: rmcp's streamable HTTP service behind the token check. Documented by
/// hand ([`gateway_endpoint`]): it speaks MCP, not REST.
pub fn mcp_endpoint(state: &AppState) -> Router<AppState> {
    let settings = &state.settings;
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = state.shutdown.child_token();
    // A call answered at once goes back as one JSON body, not an event stream (clients
    // must take both): no SSE framing, keep-alive timer or stream end per call. A call
    // that sends anything before its answer, or takes longer, still streams.
    config.json_response = true;
    config = if settings.gateway.allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(settings.gateway.allowed_hosts.clone())
    };
    let gateway = state.services.gateway.clone();
    let max_result_bytes = settings.limits.max_result_bytes;
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(std::time::Duration::from_secs(
        settings.gateway.session_idle_secs,
    ));
    let sessions = Arc::new(sessions);
    let rounds = state.services.rounds.clone();
    let mcp = SharedMcpService(Arc::new(StreamableHttpService::new(
        move || {
            Ok(GatewayHandler::new(gateway.clone(), None, max_result_bytes)
                .with_rounds(rounds.clone()))
        },
        sessions.clone(),
        config,
    )));
    Router::new()
        .route_service(GATEWAY_PATH, mcp)
        .route_layer(axum::middleware::from_fn_with_state(
            sessions,
            unknown_session_delete,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
}

/// rmcp's MCP service behind one `Arc`. axum clones a route's service (and each layer
/// around it) for every request, and rmcp's clone copies its whole config, host and origin
/// lists included: nine copies per gateway call.
#[derive(Clone)]
struct SharedMcpService(Arc<StreamableHttpService<GatewayHandler, LocalSessionManager>>);

impl tower::Service<Request> for SharedMcpService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { Ok(service.handle(request).await.map(axum::body::Body::new)) })
    }
}

/// A DELETE naming a session this instance does not hold answers 404, as the MCP
/// transport spec has servers answer unknown sessions, and a session ended by DELETE
/// answers 204: rmcp answers 202 to both, which the Python SDK logs as a failed
/// termination (it accepts 200 and 204).
async fn unknown_session_delete(
    State(sessions): State<Arc<LocalSessionManager>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    use rmcp::transport::streamable_http_server::SessionManager as _;
    let delete = request.method() == axum::http::Method::DELETE;
    if delete
        && let Some(id) = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        let id: rmcp::transport::streamable_http_server::SessionId = id.to_owned().into();
        if !sessions.has_session(&id).await.unwrap_or(false) {
            return Err(crate::error::Error::NotFound(
                crate::error::Resource::GatewaySession,
                id.to_string(),
            )
            .into());
        }
    }
    let mut response = next.run(request).await;
    if delete && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
    }
    Ok(response)
}

/// The assistant's servers as one streamable-HTTP MCP server (JSON-RPC 2.0, MCP
/// 2025-03-26 to 2025-11-25): POST requests and notifications, GET the server's stream,
/// DELETE to end the session (`Mcp-Session-Id`). Tools are named `{server}.{tool}`.
#[utoipa::path(post, path = "/mcp/assistants/{id}", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id")),
    request_body(content = Object, description = "A JSON-RPC message"),
    responses(
        (status = OK, description = "A JSON-RPC response, as JSON or as an SSE stream",
            content((Object = "application/json"), (String = "text/event-stream"))),
        (status = ACCEPTED, description = "A notification or response was accepted")))]
#[allow(dead_code)] // Documents the rmcp service mounted by `mcp_endpoint`.
pub(super) fn gateway_endpoint() {}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(delete_token))
        .routes(routes!(read_bridge, put_bridge, delete_bridge))
        .routes(routes!(bridge_statuses))
        .routes(routes!(global_servers))
        .routes(routes!(read_settings, put_settings))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct GatewaySettingsInput {
    /// `always`, `on_collision`, `never`, or null to follow the service's `gateway.prefix`.
    #[schema(pattern = "^(always|on_collision|never)$")]
    prefix: Option<String>,
}

/// The assistant's gateway settings as stored and in effect, and the tools `never` hides.
async fn settings_view(
    state: &AppState,
    user: &crate::domain::UserId,
    assistant: &AssistantId,
) -> Result<Value, ApiError> {
    let own = state
        .services
        .assistants
        .gateway_prefix(user, assistant)
        .await?;
    let principal = crate::services::GatewayPrincipal {
        user: user.clone(),
        assistant: assistant.clone(),
        channel: crate::services::GatewayChannel::Mcp,
        older_client: false,
        credential: None,
    };
    let tools = state.services.gateway.tools(&principal).await?;
    Ok(json!({
        "assistantId": assistant.as_str(),
        "prefix": own.map(|m| m.as_str()),
        "effectivePrefix": tools.mode.as_str(),
        "hiddenTools": tools.hidden.iter().map(|(server, tool)| json!({"serverName": server, "tool": tool})).collect::<Vec<_>>(),
    }))
}

/// How the gateway names this assistant's tools and prompts: `{assistantId, prefix (own,
/// or null), effectivePrefix, hiddenTools: [{serverName, tool}]}` (tools `never` does not
/// offer because an earlier bound server has a tool of that name).
#[utoipa::path(get, path = "/api/assistants/{id}/gateway", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id")), responses((status = OK, body = Value)))]
async fn read_settings(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    Ok(JsonResponse(
        settings_view(&state, &ctx.user, &assistant).await?,
    ))
}

/// Sets the assistant's prefix mode (`{"prefix": "on_collision"}`; null: the service's).
#[utoipa::path(put, path = "/api/assistants/{id}/gateway", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id")), request_body = GatewaySettingsInput, responses((status = OK, body = Value)))]
async fn put_settings(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(input): Json<GatewaySettingsInput>,
) -> Result<JsonResponse<Value>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    state
        .services
        .assistants
        .set_gateway_prefix(&ctx.user, &assistant, input.prefix.as_deref())
        .await?;
    Ok(JsonResponse(
        settings_view(&state, &ctx.user, &assistant).await?,
    ))
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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateToken {
    #[schema(min_length = 1, max_length = 128)]
    name: String,
}

/// Creates a gateway token: `{id, name, prefix, token, endpoint}`; the token is shown once.
#[utoipa::path(post, path = "/api/assistants/{id}/gateway-tokens", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id")), request_body = CreateToken, responses((status = CREATED, body = Value)))]
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

/// The assistant's gateway tokens, by prefix only: `{tokens}`.
#[utoipa::path(get, path = "/api/assistants/{id}/gateway-tokens", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id")), responses((status = OK, body = Value)))]
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

/// Deletes a token; it stops working at once.
#[utoipa::path(delete, path = "/api/assistants/{id}/gateway-tokens/{tokenId}", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id"), ("tokenId" = String, Path, description = "The token's id")),
    responses((status = NO_CONTENT)))]
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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PutBridge {
    /// `wss://…?token=…`, as the voice platform gives it.
    #[schema(format = "uri")]
    endpoint: String,
    enabled: Option<bool>,
}

fn bridge_view(bridge: &XiaozhiBridge, status: &BridgeStatus) -> Value {
    json!({
        // What the audit rows of the bridge's calls name as their key.
        "id": bridge.id,
        "assistantId": bridge.assistant_id.as_str(),
        "endpoint": redacted(&bridge.endpoint),
        "enabled": bridge.enabled,
        "status": status,
        "createdAt": bridge.created_at,
        "updatedAt": bridge.updated_at,
    })
}

/// Creates or replaces the assistant's Xiaozhi bridge.
#[utoipa::path(put, path = "/api/assistants/{id}/xiaozhi", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id")), request_body = PutBridge, responses((status = OK, body = Value)))]
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

/// The bridge: `{endpoint (query hidden), enabled, status}`.
#[utoipa::path(get, path = "/api/assistants/{id}/xiaozhi", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id")), responses((status = OK, body = Value)))]
async fn read_bridge(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let (bridge, status) = state.services.xiaozhi.get(&ctx.user, &assistant).await?;
    Ok(JsonResponse(bridge_view(&bridge, &status)))
}

/// Stops and deletes the bridge.
#[utoipa::path(delete, path = "/api/assistants/{id}/xiaozhi", tag = "gateway",
    params(("id" = ExternalId, Path, description = "The assistant's id")), responses((status = NO_CONTENT)))]
async fn delete_bridge(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    state.services.xiaozhi.delete(&ctx.user, &assistant).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every running Xiaozhi bridge and its state.
#[utoipa::path(get, path = "/admin/xiaozhi", tag = "admin",
    responses((status = OK, body = Value)))]
async fn bridge_statuses(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> JsonResponse<Value> {
    JsonResponse(json!({"bridges": state.services.xiaozhi.statuses()}))
}

/// The global servers file: `{file, loadedAt, lastError, servers}`.
#[utoipa::path(get, path = "/admin/global-servers", tag = "admin",
    responses((status = OK, body = Value)))]
async fn global_servers(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> JsonResponse<crate::services::global_servers::GlobalStatus> {
    JsonResponse(state.services.upstream.globals().status())
}
