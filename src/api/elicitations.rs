//! `POST /api/elicitations/{id}`: the user's answer to a server's question, announced on
//! their event stream as `mcp.elicitation.requested`.

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
    OpenApiRouter::new().routes(routes!(answer))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct AnswerInput {
    /// `accept` (with `content`), `decline` or `cancel`.
    #[schema(pattern = "^(accept|decline|cancel)$")]
    action: String,
    /// For `accept` of a form: the values, checked against the question's schema.
    content: Option<Value>,
}

/// Answers a server's question; `accept`'s content must match the requested schema
/// (422 `INVALID_ARGUMENTS` with one line per problem otherwise).
#[utoipa::path(post, path = "/api/elicitations/{id}", tag = "tool-calls",
    params(("id" = String, Path, description = "The question's id from mcp.elicitation.requested")),
    request_body = AnswerInput, responses((status = OK, body = Value)))]
async fn answer(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(input): Json<AnswerInput>,
) -> Result<JsonResponse<Value>, ApiError> {
    state
        .services
        .elicitations
        .answer_as_sent(&ctx.user, &id, &input.action, input.content)
        .await?;
    Ok(JsonResponse(json!({"id": id, "action": input.action})))
}
