//! `POST /api/sampling/{id}`: the user's decision on a server's sampling request, announced
//! on their event stream as `mcp.sampling.requested` (servers whose policy is `ask`).

use axum::Json as JsonResponse;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::UserContext;
use super::error::ApiError;
use super::extract::{Json, Path};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(decide))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct DecisionInput {
    /// `approve` runs the request on the server's configured model; `reject` refuses it.
    #[schema(pattern = "^(approve|reject)$")]
    action: String,
}

/// Approves or rejects a server's sampling request (404 `SAMPLING_REQUEST_NOT_FOUND`
/// once decided, expired, or for another user).
#[utoipa::path(post, path = "/api/sampling/{id}", tag = "tool-calls",
    params(("id" = String, Path, description = "The request's id from mcp.sampling.requested")),
    request_body = DecisionInput, responses((status = OK, body = Value)))]
async fn decide(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(input): Json<DecisionInput>,
) -> Result<JsonResponse<Value>, ApiError> {
    state
        .services
        .sampling
        .answer(&ctx.user, &id, &input.action)
        .await?;
    Ok(JsonResponse(json!({"id": id, "action": input.action})))
}
