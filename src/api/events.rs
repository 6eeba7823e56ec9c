//! `GET /api/events`: the caller's events as server-sent events, resumable with
//! `Last-Event-ID`, with heartbeat comments while idle.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use tokio::sync::broadcast;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::UserContext;
use crate::events;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stream))
}

fn to_sse(event: &events::Event) -> Event {
    Event::default()
        .id(event.id.to_string())
        .event(event.name)
        .data(event.data.to_string())
}

/// The caller's events (`assistant.toolCall.updated` `{messageId, toolCall}`), resumable
/// with `Last-Event-ID`, heartbeat comments while idle.
#[utoipa::path(get, path = "/api/events", tag = "tool-calls",
    params(("Last-Event-ID" = Option<String>, Header,
        description = "Resume after this event id; an id this stream did not send is ignored")),
    responses((status = OK, body = String, content_type = "text/event-stream")))]
async fn stream(
    State(state): State<AppState>,
    ctx: UserContext,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let last_seen = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (missed, live) = state.services.events.subscribe(&ctx.user, last_seen);
    let replay = futures::stream::iter(missed.into_iter().map(|e| Ok(to_sse(&e))));
    let live = futures::stream::unfold(live, |mut live| async move {
        let item = match live.recv().await {
            Ok(event) => to_sse(&event),
            // A slow client skipped some: tell it, so it can re-read state.
            Err(broadcast::error::RecvError::Lagged(skipped)) => Event::default()
                .event("stream.lagged")
                .data(format!("{{\"skipped\":{skipped}}}")),
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((Ok(item), live))
    });
    let heartbeat = Duration::from_secs(state.settings.events.heartbeat_secs);
    Sse::new(replay.chain(live)).keep_alive(KeepAlive::new().interval(heartbeat))
}
