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
    /// Readiness only: whether stdio servers start isolated (`pool.sandbox`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxHealth>,
}

/// The stdio servers' sandbox, as readiness reports it (the service is ready either way:
/// remote servers work without it).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct SandboxHealth {
    /// `on` or `off` (`pool.sandbox.mode`).
    mode: &'static str,
    /// Whether stdio servers start in a sandbox of their own.
    isolated: bool,
    /// What is wrong, in words: no sandbox can be made here (stdio servers do not
    /// start), egress cannot be offered, or isolation is turned off.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = OK, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        sandbox: None,
    })
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
    let sandbox = services.upstream.sandbox_status();
    Ok(Json(Health {
        status: "ready",
        sandbox: Some(SandboxHealth {
            mode: sandbox.mode,
            isolated: sandbox.isolated,
            problem: sandbox.problem,
        }),
    }))
}
