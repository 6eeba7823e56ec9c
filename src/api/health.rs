//! `/healthz` (the process answers) and `/readyz` (it can reach its database).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state
        .services
        .store
        .ping()
        .await
        .map_err(|e| ApiError::NotReady(e.to_string()))?;
    Ok(Json(json!({ "status": "ready" })))
}
