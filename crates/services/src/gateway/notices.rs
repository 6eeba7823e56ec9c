//! Server notices relayed to one gateway session: what it subscribed to, at the log level
//! it chose, and list changes, so its client sees what the servers behind say.

use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{
    LoggingLevel, ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerNotification,
};
use rmcp::service::{SubscriptionSendError, SubscriptionSink};

use super::Listening;

/// Where a gateway session's notices go.
pub(super) enum Listener {
    /// A 2025-11-25 session: notifications on its stream, filtered by what it subscribed
    /// to and the log level it chose.
    Stream {
        peer: rmcp::Peer<RoleServer>,
        listening: Arc<Mutex<Listening>>,
    },
    /// A 2026-07-28 client's `subscriptions/listen` request (its filter is rmcp's to
    /// apply; logging is not part of it).
    Subscription(SubscriptionSink),
}

impl Listener {
    pub(super) async fn tools_changed(&self) -> Result<(), ()> {
        match self {
            Listener::Stream { peer, .. } => peer.notify_tool_list_changed().await.map_err(|_| ()),
            Listener::Subscription(sink) => accepted(
                sink.send(ServerNotification::ToolListChangedNotification(
                    Default::default(),
                ))
                .await,
            ),
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        match self {
            Listener::Stream { peer, .. } => peer.is_transport_closed(),
            // Its request's end is what ends it (see `GatewayHandler::listen`).
            Listener::Subscription(_) => false,
        }
    }
}

/// A notification the subscription did not ask for is skipped, not an end.
fn accepted(sent: Result<(), SubscriptionSendError>) -> Result<(), ()> {
    match sent {
        Ok(())
        | Err(
            SubscriptionSendError::NotificationNotAccepted(_)
            | SubscriptionSendError::UnsupportedNotification(_),
        ) => Ok(()),
        Err(_) => Err(()),
    }
}

/// Passes a server's log message (at or above the session's level), resource update (of
/// a resource the session subscribed to) or resource/prompt list change on to the
/// session's client.
pub(super) async fn relay(
    listener: &Listener,
    event: &crate::mcp::UpstreamEvents,
) -> Result<(), ()> {
    let (peer, listening) = match listener {
        Listener::Stream { peer, listening } => (peer, listening),
        Listener::Subscription(sink) => {
            let notification = match event {
                crate::mcp::UpstreamEvents::ResourceUpdated(uri) => {
                    ServerNotification::ResourceUpdatedNotification(
                        ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(
                            uri.clone(),
                        )),
                    )
                }
                crate::mcp::UpstreamEvents::ResourcesChanged => {
                    ServerNotification::ResourceListChangedNotification(Default::default())
                }
                crate::mcp::UpstreamEvents::PromptsChanged => {
                    ServerNotification::PromptListChangedNotification(Default::default())
                }
                _ => return Ok(()),
            };
            return accepted(sink.send(notification).await);
        }
    };
    let sent = match event {
        crate::mcp::UpstreamEvents::Log(message) => {
            let wanted = match listening.lock().expect("listening lock").level {
                Some(level) => severity(message.level) >= severity(level),
                None => true,
            };
            if wanted {
                peer.notify_logging_message(message.clone()).await
            } else {
                Ok(())
            }
        }
        crate::mcp::UpstreamEvents::ResourceUpdated(uri) => {
            let wanted = listening
                .lock()
                .expect("listening lock")
                .subscriptions
                .contains(uri);
            if wanted {
                peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                    .await
            } else {
                Ok(())
            }
        }
        crate::mcp::UpstreamEvents::ResourcesChanged => peer.notify_resource_list_changed().await,
        crate::mcp::UpstreamEvents::PromptsChanged => peer.notify_prompt_list_changed().await,
        _ => Ok(()),
    };
    sent.map_err(|_| ())
}

/// Severity order of log levels (RFC 5424, as MCP uses them).
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
