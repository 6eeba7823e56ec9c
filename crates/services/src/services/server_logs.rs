//! Servers' log messages (`notifications/message`) on their users' event streams as
//! `mcp.log`, for REST, chat and gRPC callers (gateway sessions get them relayed at their
//! own level, see `gateway`; the service log gets them from the connection, under the
//! request of the call they came during). Global servers' logs, shared by every user,
//! go to no user.

// Log notifications are deprecated in 2026-07-28 but are what 2025-11-25 servers send.
#![allow(deprecated)]

use std::sync::Arc;

use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::domain::UserId;
use crate::events::EventHub;
use crate::mcp::UpstreamEvents;
use crate::pool::Pool;

/// Relays until the pool is gone.
pub fn relay(pool: &Pool, events: Arc<EventHub>) {
    let mut notices = pool.subscribe_notices();
    tokio::spawn(async move {
        loop {
            let notice = match notices.recv().await {
                Ok(notice) => notice,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "server log messages were dropped: too many at once");
                    continue;
                }
                Err(RecvError::Closed) => break,
            };
            let UpstreamEvents::Log(message) = &notice.event else {
                continue;
            };
            let key = &notice.key;
            let level = serde_json::to_value(message.level).unwrap_or_default();
            if key.user == UserId::global() {
                continue;
            }
            events.publish(
                &key.user,
                "mcp.log",
                json!({
                    "serverId": key.server,
                    "scope": key.scope.as_deref(),
                    "level": level,
                    "logger": message.logger,
                    "data": message.data,
                }),
            );
        }
    });
}
