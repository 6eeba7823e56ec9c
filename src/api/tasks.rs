//! Tool calls run as tasks: started by `POST /api/mcp-servers/{id}/tools/{tool}/call`
//! with `Prefer: respond-async` (202 with the task), then read, waited on and cancelled
//! here, from any instance. Every change of status is also a `task.updated` event on
//! `GET /api/events`.

use axum::Json as JsonResponse;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::UserContext;
use super::error::ApiError;
use super::extract::{Path, Query};
use crate::domain::TaskStatus;
use crate::error::Error;
use crate::services::tasks::task_json;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(get, cancel))
        .routes(routes!(result))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// At most this many, newest first (1 to 500; 100 when left out).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// The user's tasks that have not expired, newest first: `{tasks: [task…]}`.
#[utoipa::path(get, path = "/api/tasks", tag = "tasks", params(ListQuery),
    responses((status = OK, body = Value)))]
async fn list(
    State(state): State<AppState>,
    ctx: UserContext,
    Query(query): Query<ListQuery>,
) -> Result<JsonResponse<Value>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(Error::validation("limit must be 1 to 500").into());
    }
    let tasks = &state.services.tasks;
    let listed = tasks.list(&ctx.user, limit.into()).await?;
    let poll = tasks.poll_interval();
    Ok(JsonResponse(json!({
        "tasks": listed.iter().map(|task| task_json(task, poll)).collect::<Vec<_>>(),
    })))
}

/// A task: `taskId`, `status` (`working`, `completed`, `failed`, `cancelled`),
/// `statusMessage` (the call's latest progress message), `server`, `tool`, `origin`,
/// `createdAt`, `lastUpdatedAt`, `ttlMs` (kept that long from creation),
/// `pollIntervalMs`, and once it has ended `result` (as the call's answer) or `error`
/// (`{code, message, data: {code}}`).
#[utoipa::path(get, path = "/api/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "The task's id")),
    responses((status = OK, body = Value)))]
async fn get(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let tasks = &state.services.tasks;
    let task = tasks.get(&ctx.user, None, &id).await?;
    Ok(JsonResponse(task_json(&task, tasks.poll_interval())))
}

/// Cancels a task that is still working (its call is abandoned and the server told);
/// one that has ended stays as it is. Answers the task as it stands after.
#[utoipa::path(delete, path = "/api/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "The task's id")),
    responses((status = OK, body = Value)))]
async fn cancel(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let tasks = &state.services.tasks;
    let task = tasks.cancel(&ctx.user, None, &id).await?;
    Ok(JsonResponse(task_json(&task, tasks.poll_interval())))
}

/// The call's answer once the task has completed (the body a synchronous call gives,
/// without `progress` and `latencyMs`); 409 `TASK_NOT_FINISHED` while it works, 409
/// `TASK_HAS_NO_RESULT` when it failed or was cancelled (the message says why).
#[utoipa::path(get, path = "/api/tasks/{id}/result", tag = "tasks",
    params(("id" = String, Path, description = "The task's id")),
    responses((status = OK, body = Value)))]
async fn result(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let task = state.services.tasks.get(&ctx.user, None, &id).await?;
    match task.status {
        TaskStatus::Completed => Ok(JsonResponse(task.result.unwrap_or(Value::Null))),
        TaskStatus::Failed => {
            let why = task
                .error
                .as_ref()
                .and_then(|error| error.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("no reason was recorded");
            Err(Error::TaskEndedWithout(format!("the task failed: {why}")).into())
        }
        TaskStatus::Cancelled => {
            Err(Error::TaskEndedWithout("the task was cancelled".into()).into())
        }
        open => Err(Error::TaskNotFinished(open).into()),
    }
}
