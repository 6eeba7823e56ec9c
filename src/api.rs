//! HTTP: routing, auth extraction, request/response shapes, error mapping.
//!
//! Only this module knows axum and HTTP status codes. Handlers are thin: extract, call one
//! service method, turn the result into a view.

mod assistants;
mod auth;
mod catalog;
mod chat;
pub(crate) mod connections;
mod console;
mod elicitations;
mod error;
mod events;
mod external_id;
mod extract;
mod gateway;
mod health;
mod keys;
mod messages;
mod metrics;
mod oauth;
mod openapi;
mod operators;
mod policies;
mod presets;
mod sampling;
mod servers;
mod tasks;
mod teams;
mod upstream;

use std::future::IntoFuture;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Request, Uri};
use tokio::net::TcpListener;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_swagger_ui::SwaggerUi;

pub use error::ApiError;

use crate::app::Services;
use crate::config::Settings;

/// The response header naming the instance that answered (its id in `instances`).
const INSTANCE_HEADER: HeaderName = HeaderName::from_static("x-instance-id");

/// What every handler can reach: one allocation shared by every request. Extractors,
/// middleware and the gateway clone it per request, so it is a pointer, not the services.
pub type AppState = Arc<AppContext>;

pub struct AppContext {
    pub services: Services,
    pub settings: Arc<Settings>,
    /// Cancelled when the service stops: long-lived streams (gateway sessions) end.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Cancelled when the shutdown grace has run out: requests still running are answered
    /// 503 `SHUTTING_DOWN` rather than cut off with no answer.
    pub grace_over: tokio_util::sync::CancellationToken,
}

/// Races each request with the end of the shutdown grace.
async fn answer_when_grace_ends(
    axum::extract::State(grace_over): axum::extract::State<tokio_util::sync::CancellationToken>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    tokio::select! {
        biased;
        response = next.run(request) => response,
        () = grace_over.cancelled() => {
            axum::response::IntoResponse::into_response(ApiError::ShuttingDown)
        }
    }
}

/// Serves the API on `listener` until `stopping` completes; requests in flight then
/// finish.
pub fn serve(
    listener: TcpListener,
    state: AppState,
    stopping: impl std::future::Future<Output = ()> + Send + 'static,
) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
    axum::serve(with_nodelay(listener), router(state))
        .with_graceful_shutdown(stopping)
        .into_future()
}

/// The HTTP listener as served: every accepted socket gets TCP_NODELAY. Without it an
/// answer written in pieces (rmcp's SSE: headers and a priming event, then the result)
/// waits for the client's delayed ACK, ~40 ms on every call of a kept-alive client.
fn with_nodelay(
    listener: TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|socket| {
        if let Err(error) = socket.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY on an accepted socket");
        }
    })
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.settings.server.max_body_bytes;
    // Behind a load balancer, where a request landed is otherwise invisible.
    let instance = HeaderValue::from_str(&state.services.cluster.me().to_string())
        .expect("a UUID is a header value");
    let (rest, mut spec) = documented_routes().split_for_parts();
    openapi::add_shared_parts(&mut spec);
    let routes = rest
        .merge(gateway::mcp_endpoint(&state))
        .merge(console::routes(&state))
        .merge(SwaggerUi::new("/docs").url("/openapi.json", spec))
        .fallback(|uri: Uri| async move { ApiError::RouteNotFound(uri.path().to_owned()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        // Per route: it labels requests by the route template the router matched.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::record,
        ))
        .with_state(state.clone());
    // The rest wrap the router once. `Router::layer` would wrap each route in its own boxed
    // stack, which a request clones level by level (O(layers²) boxed clones: ~70 per
    // gateway call with these seven, ~6% of its instructions).
    let common = tower::ServiceBuilder::new()
        .layer(SetResponseHeaderLayer::overriding(
            INSTANCE_HEADER,
            instance,
        ))
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                let request_id = request
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                tracing::info_span!(
                    "http",
                    method = %request.method(),
                    path = %request.uri().path(),
                    request_id,
                    key_id = tracing::field::Empty,
                    user = tracing::field::Empty,
                )
            }),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                axum::response::IntoResponse::into_response(ApiError::Panic)
            },
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.grace_over.clone(),
            answer_when_grace_ends,
        ))
        .service(routes);
    Router::new().fallback_service(common)
}

/// Every REST route with its OpenAPI operation (see `openapi.rs`).
fn documented_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(health::routes())
        .merge(metrics::routes())
        .merge(servers::routes())
        .merge(assistants::routes())
        .merge(presets::routes())
        .merge(catalog::routes())
        .merge(keys::routes())
        .merge(upstream::routes())
        .merge(connections::routes())
        .merge(operators::routes())
        .merge(policies::routes())
        .merge(teams::routes())
        .merge(messages::routes())
        .merge(events::routes())
        .merge(chat::routes())
        .merge(gateway::routes())
        .merge(oauth::routes())
        .merge(elicitations::routes())
        .merge(sampling::routes())
        .merge(tasks::routes())
        .merge(console::session_routes())
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    #[tokio::test]
    async fn accepted_sockets_have_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut served = super::with_nodelay(listener);
        let _client = tokio::net::TcpStream::connect(address).await.unwrap();
        let (socket, _) = served.accept().await;
        assert!(socket.nodelay().unwrap());
    }
}
