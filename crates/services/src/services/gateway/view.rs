//! The assistant's tools as the gateway offers them: named by its prefix mode, and the
//! view kept while nothing it was built from changes, so a listing costs a lookup.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::Tool;
use uuid::Uuid;

use super::{GatewayPrincipal, GatewayService};
use crate::domain::ToolExposure;
use crate::domain::app_ui;
use crate::domain::tool_name::{PrefixMode, gateway_names, names_by_mode};
use crate::domain::tool_search::search_mode_tools;
use crate::error::{Error, Resource as Missing, Result};
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
    /// How the tools are offered: all, or a search over them (`tools/list` then lists
    /// `search_tools`, `call_tool` and the pinned tools).
    pub exposure: ToolExposure,
    /// Tools not offered because another server's tool has the same name (`never`):
    /// (server name, tool name).
    pub hidden: Vec<(String, String)>,
    /// MCP Apps: the views the tools declare, named like the tools (a `ui://` URI per
    /// server and view, see `app_ui::gateway_ui_uri`): gateway URI → (server, its URI).
    pub(super) views: ViewsByName,
    /// (server, its URI) → gateway URI.
    pub(super) view_names: NamesOfViews,
}

/// A view's gateway URI → its server and the server's own URI.
type ViewsByName = HashMap<String, (Uuid, String)>;
/// A server's view (server, its URI) → its gateway URI.
type NamesOfViews = HashMap<(Uuid, String), String>;

impl GatewayTools {
    /// The tools as an MCP client sees them: each view under its gateway URI; tools only
    /// a view may call only to a client that renders views (`for_apps`).
    /// In search mode, the model's tools are `search_tools`, `call_tool` and the pinned
    /// ones (a view's host also gets the tools only views call).
    pub fn tools(&self, for_apps: bool) -> Vec<Tool> {
        let search = self.exposure == ToolExposure::Search;
        let meta = search.then(|| {
            search_mode_tools().into_iter().map(|meta| {
                let schema = match meta.input_schema {
                    serde_json::Value::Object(schema) => schema,
                    _ => Default::default(),
                };
                Tool::new(meta.name, meta.description, Arc::new(schema))
            })
        });
        let tools = self.ordered.iter().filter_map(|name| {
            let listed = &self.listing.tools[self.names[name]];
            let ui = listed.ui();
            if !ui.for_model && !for_apps {
                return None;
            }
            if search && ui.for_model && !listed.pinned {
                return None;
            }
            let mut tool = listed.tool.clone();
            tool.name = name.clone().into();
            if let Some(uri) = ui.resource_uri
                && let Some(gateway_uri) = self.gateway_view(listed.server.server.id, uri)
                && let Some(meta) = tool.meta.as_mut()
            {
                app_ui::set_tool_resource_uri(meta, gateway_uri);
            }
            Some(tool)
        });
        meta.into_iter().flatten().chain(tools).collect()
    }

    /// The gateway name of the tool at `index` of the listing, if it is offered.
    pub fn name_at(&self, index: usize) -> Option<&str> {
        self.names
            .iter()
            .find(|(_, at)| **at == index)
            .map(|(name, _)| name.as_str())
    }

    /// Whether a tool declares a view (the gateway then offers MCP Apps).
    pub fn has_views(&self) -> bool {
        !self.views.is_empty()
    }

    /// The server and its own URI of a view by its gateway URI.
    pub fn view(&self, gateway_uri: &str) -> Option<(Uuid, &str)> {
        self.views
            .get(gateway_uri)
            .map(|(server, uri)| (*server, uri.as_str()))
    }

    /// A server's view by its gateway URI.
    pub fn gateway_view(&self, server: Uuid, uri: &str) -> Option<&str> {
        self.view_names
            .get(&(server, uri.to_owned()))
            .map(String::as_str)
    }

    /// The tool a view's call names (relayed by its host, `view` the view's gateway URI):
    /// one of the view's own server, by the server's own name (as the view knows it) or
    /// by its gateway name. A tool of another server is refused.
    pub fn app_tool(&self, view: &str, name: &str) -> Result<usize> {
        let Some((server, _)) = self.view(view) else {
            return Err(Error::AppCallRefused(format!(
                "'{view}' is not a view of this assistant's servers"
            )));
        };
        if let Some(own) = self
            .listing
            .tools
            .iter()
            .position(|t| t.server.server.id == server && t.tool.name == name)
        {
            return Ok(own);
        }
        match self.names.get(name) {
            Some(&index) if self.listing.tools[index].server.server.id == server => Ok(index),
            Some(&index) => Err(Error::AppCallRefused(format!(
                "the view '{view}' belongs to another server than '{}': a view calls only its own server's tools",
                self.listing.tools[index].server.server.spec.name.as_str()
            ))),
            None => Err(Error::NotFound(Missing::Tool, name.to_owned())),
        }
    }
}

/// A built tool view and its sources: each bound server's runtime and catalog. Any change
/// that matters (a `list_changed`, a refresh, a server or binding change) replaces one of
/// those `Arc`s or the list itself, so an equal list means the view is still exact.
/// Holding the `Arc`s keeps their addresses from being reused while compared.
pub(super) struct ToolView {
    pub(super) mode: PrefixMode,
    pub(super) exposure: ToolExposure,
    pub(super) sources: Vec<(Uuid, Option<Sources>)>,
    /// The policy rules' version and the user's attributes it was filtered by.
    pub(super) governance: Governance,
    /// The assistant's tool curation it applied.
    pub(super) overrides: Arc<crate::domain::ToolOverrides>,
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
        exposure: ToolExposure,
        catalogs: &[ServerCatalog],
        governance: &Governance,
        overrides: &Arc<crate::domain::ToolOverrides>,
    ) -> bool {
        self.mode == mode
            && self.exposure == exposure
            && self.governance == *governance
            && (Arc::ptr_eq(&self.overrides, overrides) || *self.overrides == **overrides)
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
        let settings = self
            .bindings
            .settings(&principal.user, &principal.assistant)
            .await?;
        Ok(self.mode_of(&settings))
    }

    /// The prefix mode `settings` give: the assistant's own, else the service's.
    pub(super) fn mode_of(
        &self,
        settings: &super::super::assistants::AssistantSettings,
    ) -> PrefixMode {
        settings
            .prefix
            .unwrap_or_else(|| PrefixMode::parse(&self.settings.gateway.prefix).unwrap_or_default())
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
        exposure: ToolExposure,
        separator: &str,
        listing: AssistantTools,
    ) -> GatewayTools {
        // A name the user chose (curation) is the tool's as it is; the others are named by
        // the prefix mode among themselves, and one that would take a chosen name is not
        // offered.
        let chosen: std::collections::HashSet<&str> = listing
            .tools
            .iter()
            .filter_map(|t| t.alias.as_deref())
            .collect();
        let unchosen: Vec<usize> = (0..listing.tools.len())
            .filter(|&i| listing.tools[i].alias.is_none())
            .collect();
        let items: Vec<(&str, &str)> = unchosen
            .iter()
            .map(|&i| {
                let t = &listing.tools[i];
                (t.server.server.spec.name.as_str(), t.tool.name.as_ref())
            })
            .collect();
        let mut generated = gateway_names(mode, separator, &items).into_iter();
        let named: Vec<Option<String>> = listing
            .tools
            .iter()
            .map(|t| match &t.alias {
                Some(alias) => Some(alias.clone()),
                None => generated
                    .next()
                    .flatten()
                    .filter(|name| !chosen.contains(name.as_str())),
            })
            .collect();
        let mut names = HashMap::new();
        let mut ordered = Vec::new();
        let mut hidden = Vec::new();
        for (index, name) in named.into_iter().enumerate() {
            match name {
                Some(name) => {
                    names.insert(name.clone(), index);
                    ordered.push(name);
                }
                None => {
                    let hid = &listing.tools[index];
                    let (server, tool) =
                        (hid.server.server.spec.name.as_str(), hid.tool.name.as_ref());
                    tracing::info!(
                        server,
                        tool,
                        "a tool is not offered by the gateway: another bound server's tool has its name"
                    );
                    hidden.push((server.to_owned(), tool.to_owned()));
                }
            }
        }
        let (views, view_names) = name_views(mode, separator, &listing);
        GatewayTools {
            listing,
            names,
            ordered,
            mode,
            exposure,
            hidden,
            views,
            view_names,
        }
    }
}

/// The views the tools declare, one per (server, URI), named by the prefix mode as tools
/// are: `always` puts every view under its server, `on_collision` those two servers share,
/// `never` none (of two equal URIs the first server's is offered).
fn name_views(
    mode: PrefixMode,
    separator: &str,
    listing: &AssistantTools,
) -> (ViewsByName, NamesOfViews) {
    let mut declared: Vec<(Uuid, &str, &str)> = Vec::new();
    for tool in &listing.tools {
        let server = &tool.server.server;
        if let Some(uri) = tool.ui().resource_uri
            && !declared
                .iter()
                .any(|(id, _, u)| *id == server.id && *u == uri)
        {
            declared.push((server.id, server.spec.name.as_str(), uri));
        }
    }
    let items: Vec<(&str, &str)> = declared.iter().map(|(_, s, u)| (*s, *u)).collect();
    let named = names_by_mode(mode, &items, |server, uri| {
        app_ui::gateway_ui_uri(server, separator, uri).unwrap_or_else(|| uri.to_owned())
    });
    let mut views = HashMap::new();
    let mut view_names = HashMap::new();
    for ((server, _, uri), name) in declared.into_iter().zip(named) {
        if let Some(name) = name {
            views.insert(name.clone(), (server, uri.to_owned()));
            view_names.insert((server, uri.to_owned()), name);
        }
    }
    (views, view_names)
}
