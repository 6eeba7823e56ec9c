//! `/healthz` (the process answers) and `/readyz` (it can reach its database).

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

/// Readiness: the database can be read and written, within a second (503 `NOT_READY`
/// otherwise).
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = OK, body = Health)))]
async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    let services = &state.services;
    services
        .store
        .ready(services.cluster.me())
        .await
        .map_err(|e| ApiError::NotReady(format!("the database cannot be used: {e}")))?;
    Ok(Json(Health { status: "ready" }))
}
