//! The client-side handler: what an upstream may tell us while connected.

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::mpsc;

/// Things an upstream announces that its owner (the connection actor) must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamEvents {
    ToolsChanged,
    ResourcesChanged,
    PromptsChanged,
}

pub struct PoolClientHandler {
    /// Routes `notifications/progress` to the call that asked for them.
    pub(super) progress: ProgressDispatcher,
    events: mpsc::UnboundedSender<UpstreamEvents>,
}

impl PoolClientHandler {
    pub fn new(events: mpsc::UnboundedSender<UpstreamEvents>) -> Self {
        Self {
            progress: ProgressDispatcher::new(),
            events,
        }
    }
}

impl ClientHandler for PoolClientHandler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcp-pool", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvents::ToolsChanged);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvents::ResourcesChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvents::PromptsChanged);
    }
}
