//! Server notices relayed to one gateway session: what it subscribed to, at the log level
//! it chose, and list changes, so its client sees what the servers behind say.

use std::sync::Mutex;

use rmcp::RoleServer;
use rmcp::model::{LoggingLevel, ResourceUpdatedNotificationParam};

use super::Listening;

/// Passes a server's log message (at or above the session's level), resource update (of
/// a resource the session subscribed to) or resource/prompt list change on to the
/// session's client.
pub(super) async fn relay(
    peer: &rmcp::Peer<RoleServer>,
    listening: &Mutex<Listening>,
    event: &crate::mcp::UpstreamEvents,
) -> Result<(), rmcp::service::ServiceError> {
    match event {
        crate::mcp::UpstreamEvents::Log(message) => {
            let wanted = match listening.lock().expect("listening lock").level {
                Some(level) => severity(message.level) >= severity(level),
                None => true,
            };
            if wanted {
                peer.notify_logging_message(message.clone()).await?;
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
                    .await?;
            }
        }
        crate::mcp::UpstreamEvents::ResourcesChanged => {
            peer.notify_resource_list_changed().await?;
        }
        crate::mcp::UpstreamEvents::PromptsChanged => {
            peer.notify_prompt_list_changed().await?;
        }
        _ => {}
    }
    Ok(())
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
