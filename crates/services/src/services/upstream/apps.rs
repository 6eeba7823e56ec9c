//! MCP Apps: which views (`ui://` resources) are a server's, so a host's relay of a
//! view's call reaches only the tools of the view's own server.

use super::UpstreamService;
use crate::domain::UserId;
use crate::domain::app_ui::{ToolUi, is_ui_uri};
use crate::error::{Error, Result};

impl UpstreamService {
    /// Whether `uri` is one of server `server_id`'s views: a tool of it declares it, or it
    /// lists it as a resource. A view of another server (or no view) is refused.
    pub async fn check_view(&self, user: &UserId, server_id: &str, uri: &str) -> Result<()> {
        let (runtime, catalog) = self.tools(user, server_id).await?;
        if is_ui_uri(uri) {
            let declared = catalog
                .tools
                .iter()
                .any(|tool| ToolUi::of(tool.meta.as_deref()).resource_uri == Some(uri));
            if declared
                || self
                    .resources(user, server_id)
                    .await
                    .is_ok_and(|listed| listed.resources.iter().any(|r| r.uri == uri))
            {
                return Ok(());
            }
        }
        Err(Error::AppCallRefused(format!(
            "'{uri}' is not a view of the server '{}': a view calls only its own server's tools",
            runtime.server.spec.name.as_str()
        )))
    }
}
