//! The assistant's tools as the gateway offers them: named by its prefix mode, and the
//! view kept while nothing it was built from changes, so a listing costs a lookup.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::Tool;
use uuid::Uuid;

use super::{GatewayPrincipal, GatewayService};
use crate::domain::tool_name::{PrefixMode, gateway_names};
use crate::error::Result;
use crate::services::{AssistantTools, ServerCatalog};

/// The assistant's tools under their gateway names.
pub struct GatewayTools {
    pub listing: AssistantTools,
    /// Gateway name → index into `listing.tools`.
    pub(super) names: HashMap<String, usize>,
    /// Gateway names in the listing's order.
    pub ordered: Vec<String>,
    /// The naming this view was built with.
    pub mode: PrefixMode,
    /// Tools not offered because another server's tool has the same name (`never`):
    /// (server name, tool name).
    pub hidden: Vec<(String, String)>,
}

impl GatewayTools {
    /// The tools as an MCP client sees them.
    pub fn tools(&self) -> Vec<Tool> {
        self.ordered
            .iter()
            .map(|name| {
                let mut tool = self.listing.tools[self.names[name]].tool.clone();
                tool.name = name.clone().into();
                tool
            })
            .collect()
    }
}

/// A built tool view and its sources: each bound server's runtime and catalog. Any change
/// that matters (a `list_changed`, a refresh, a server or binding change) replaces one of
/// those `Arc`s or the list itself, so an equal list means the view is still exact.
/// Holding the `Arc`s keeps their addresses from being reused while compared.
pub(super) struct ToolView {
    pub(super) mode: PrefixMode,
    pub(super) sources: Vec<(Uuid, Option<Sources>)>,
    /// The policy rules' version and the user's attributes it was filtered by.
    pub(super) governance: Governance,
    pub(super) tools: Arc<GatewayTools>,
}

pub(super) type Governance = (i64, Option<Arc<crate::domain::UserAttributes>>);

pub(super) type Sources = (
    Arc<crate::pool::ServerRuntime>,
    Arc<crate::pool::ToolCatalog>,
);

impl ToolView {
    pub(super) fn built_from(
        &self,
        mode: PrefixMode,
        catalogs: &[ServerCatalog],
        governance: &Governance,
    ) -> bool {
        self.mode == mode
            && self.governance == *governance
            && self.sources.len() == catalogs.len()
            && self.sources.iter().zip(catalogs).all(|((id, kept), now)| {
                *id == now.server_id
                    && match (kept, &now.listing) {
                        (Some((runtime, catalog)), Ok((now_runtime, now_catalog))) => {
                            Arc::ptr_eq(runtime, now_runtime) && Arc::ptr_eq(catalog, now_catalog)
                        }
                        _ => false,
                    }
            })
    }
}

impl GatewayService {
    /// The assistant's prefix mode: its own, else the service's.
    pub(super) async fn prefix_mode(&self, principal: &GatewayPrincipal) -> Result<PrefixMode> {
        let own = self
            .bindings
            .gateway_prefix(&principal.user, &principal.assistant)
            .await?;
        Ok(own.unwrap_or_else(|| {
            PrefixMode::parse(&self.settings.gateway.prefix).unwrap_or_default()
        }))
    }

    /// The separator of the door `principal` came in by.
    pub(super) fn separator(&self, principal: &GatewayPrincipal) -> &str {
        match principal.channel {
            super::GatewayChannel::Mcp => &self.settings.gateway.separator,
            super::GatewayChannel::Xiaozhi => &self.settings.xiaozhi.separator,
        }
    }

    pub(super) fn name_tools(
        &self,
        mode: PrefixMode,
        separator: &str,
        listing: AssistantTools,
    ) -> GatewayTools {
        let items: Vec<(&str, &str)> = listing
            .tools
            .iter()
            .map(|t| (t.server.server.spec.name.as_str(), t.tool.name.as_ref()))
            .collect();
        let mut names = HashMap::new();
        let mut ordered = Vec::new();
        let mut hidden = Vec::new();
        for (index, name) in gateway_names(mode, separator, &items)
            .into_iter()
            .enumerate()
        {
            match name {
                Some(name) => {
                    names.insert(name.clone(), index);
                    ordered.push(name);
                }
                None => {
                    let (server, tool) = items[index];
                    tracing::info!(
                        server,
                        tool,
                        "a tool is not offered by the gateway: another bound server's tool has its name"
                    );
                    hidden.push((server.to_owned(), tool.to_owned()));
                }
            }
        }
        drop(items);
        GatewayTools {
            listing,
            names,
            ordered,
            mode,
            hidden,
        }
    }
}
