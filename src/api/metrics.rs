//! `GET /metrics` (Prometheus text format) and the middleware timing every request.
//!
//! Unauthenticated like `/healthz`: it carries no tenant data (no user or server ids), and
//! operators keep it off the public network as they would any scrape target.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::metrics::{HttpLabels, LiveCounts};
use crate::pool::census;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(scrape))
}

/// Prometheus/OpenMetrics text; no tenant ids (README, Metrics).
#[utoipa::path(get, path = "/metrics", tag = "health", responses(
    (status = OK, body = String, content_type = "application/openmetrics-text")))]
async fn scrape(State(state): State<AppState>) -> Response {
    let services = &state.services;
    let live = LiveCounts {
        connections: census(&services.upstream.connections()),
        confirmation_actors: services.confirmations.active_messages() as i64,
        parked_calls: services.confirmations.parked_calls(),
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        services.pool.metrics().render(live),
    )
        .into_response()
}

/// Times a request under its route template; unmatched paths share one label.
pub async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    state.services.pool.metrics().http_request(
        HttpLabels {
            method,
            route,
            status: response.status().as_u16(),
        },
        started.elapsed(),
    );
    response
}
