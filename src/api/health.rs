//! `/healthz` (the process answers) and `/readyz` (it can reach its database).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

#[derive(Serialize, ToSchema)]
struct Health {
    /// `ok` (liveness) or `ready` (readiness).
    #[schema(example = "ok")]
    status: &'static str,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = OK, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// How long readiness waits for the database's answer.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// Readiness: the database can be read and written, within a second (503 `NOT_READY`
/// otherwise).
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = OK, body = Health)))]
async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    let services = &state.services;
    match tokio::time::timeout(PROBE_WAIT, services.store.probe(services.cluster.me())).await {
        Ok(Ok(())) => Ok(Json(Health { status: "ready" })),
        Ok(Err(e)) => Err(ApiError::NotReady(format!(
            "the database cannot be used: {e}"
        ))),
        Err(_) => Err(ApiError::NotReady(format!(
            "the database did not answer within {} ms",
            PROBE_WAIT.as_millis()
        ))),
    }
}
