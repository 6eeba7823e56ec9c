//! `GET /api/events`: the caller's events as server-sent events, resumable with
//! `Last-Event-ID`, with heartbeat comments while idle. `GET /admin/events`: what an
//! operator watches live (connections as they change, counts, recent calls).

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
use super::auth::{AdminContext, UserContext};
use crate::events;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stream))
        .routes(routes!(admin_stream))
}

/// How often counts and the recent-calls window are sent while nothing changes.
const ADMIN_TICK: Duration = Duration::from_secs(5);
/// Counts are sent this soon after a connection changed, once for a burst of changes.
const STATS_AFTER_CHANGE: Duration = Duration::from_millis(300);

/// What an operator watches: `connection` (a live connection as `/admin/connections`
/// shows it, sent when it appears or changes state), `connection.removed`
/// (`{userId, serverId, scope}`), `stats` (`/admin/stats`, after changes and every 5 s),
/// `calls` (`/admin/metrics/recent`, every 5 s) and `stream.lagged` (events were skipped:
/// read the lists again).
#[utoipa::path(get, path = "/admin/events", tag = "admin",
    responses((status = OK, body = String, content_type = "text/event-stream")))]
async fn admin_stream(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(256);
    let mut activity = state.services.pool.subscribe_activity();
    let heartbeat = Duration::from_secs(state.settings.events.heartbeat_secs);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(ADMIN_TICK);
        let mut stats_at: Option<tokio::time::Instant> = None;
        loop {
            let event = tokio::select! {
                () = tx.closed() => break,
                () = state.shutdown.cancelled() => break,
                _ = tick.tick() => {
                    let calls = super::operators::recent_calls_body(
                        &state.services.pool.metrics().recent_calls(),
                    );
                    if tx.send(json_event("calls", &calls)).await.is_err() {
                        break;
                    }
                    json_event("stats", &super::connections::stats_body(&state))
                }
                () = sleep_until_some(stats_at) => {
                    stats_at = None;
                    json_event("stats", &super::connections::stats_body(&state))
                }
                note = activity.recv() => match note {
                    Ok(key) => {
                        stats_at.get_or_insert_with(|| {
                            tokio::time::Instant::now() + STATS_AFTER_CHANGE
                        });
                        match state.services.pool.connection(&key) {
                            Some(info) => json_event(
                                "connection",
                                &super::connections::ConnectionView::from(info),
                            ),
                            None => json_event("connection.removed", &removed(&key)),
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(skipped)) => Event::default()
                        .event("stream.lagged")
                        .data(format!("{{\"skipped\":{skipped}}}")),
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            };
            if tx.send(event).await.is_err() {
                break;
            }
        }
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok))
        .keep_alive(KeepAlive::new().interval(heartbeat))
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn json_event(name: &'static str, data: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(data).unwrap_or_default())
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

/// A connection that ended, named as its `connection` rows are (`olderClients` only for
/// the 2025-11-25 session kept for older gateway clients).
fn removed(key: &crate::pool::ConnectionKey) -> serde_json::Value {
    let mut removed = serde_json::json!({
        "userId": key.user.as_str(),
        "serverId": key.server.to_string(),
        "scope": key.scope.as_deref(),
    });
    if key.revision == crate::mcp::SessionRevision::Initialize {
        removed["olderClients"] = serde_json::Value::Bool(true);
    }
    removed
}
