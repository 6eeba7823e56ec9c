//! An assistant's tools across its bound servers (and the global ones), named uniquely;
//! one server failing does not hide the others.

use std::sync::Arc;

use uuid::Uuid;

use super::UpstreamService;
use crate::domain::app_ui::ToolUi;
use crate::domain::tool_name::{ToolNameTable, ToolRef};
use crate::domain::{AssistantId, CallVia, ToolOverrides, UserId};
use crate::error::{Error, Result};
use crate::pool::{ServerRuntime, ToolCatalog};
use crate::services::policies::CallDecider;

/// One enabled tool of an assistant, under its model-facing name.
pub struct AssistantTool {
    pub name: String,
    pub server: Arc<ServerRuntime>,
    pub tool: rmcp::model::Tool,
    /// The server's catalog, to check arguments without listing again.
    pub catalog: Arc<ToolCatalog>,
    /// The name the user gave it for this assistant (curation), which models and gateway
    /// clients call it by; `tool.name` stays the server's.
    pub alias: Option<String>,
    /// The user pinned it (kept in the model's list in search mode).
    pub pinned: bool,
}

impl AssistantTool {
    /// What the tool's `_meta` says of its view and who may call it (MCP Apps).
    pub fn ui(&self) -> ToolUi<'_> {
        ToolUi::of(self.tool.meta.as_deref())
    }
}

/// A bound server whose tools could not be listed; the others are still offered.
pub struct UnavailableServer {
    pub server_id: Uuid,
    pub error: Error,
}

pub struct AssistantTools {
    /// In the table's order.
    pub tools: Vec<AssistantTool>,
    pub table: ToolNameTable,
    pub unavailable: Vec<UnavailableServer>,
}

/// Who an assistant's tools are listed for (MCP Apps' `visibility`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Audience {
    /// A model: app-only tools are left out (REST formats, chat, gRPC).
    Model,
    /// A host that renders views (the gateway): every tool, each told apart by
    /// [`AssistantTool::ui`].
    ModelAndApps,
}

/// One bound server's part of an assistant's tools.
pub struct ServerCatalog {
    pub server_id: Uuid,
    pub listing: Result<(Arc<ServerRuntime>, Arc<ToolCatalog>)>,
}

/// A tool on its way into the listing, with the user's curation.
struct Curated {
    runtime: Arc<ServerRuntime>,
    tool: rmcp::model::Tool,
    catalog: Arc<ToolCatalog>,
    alias: Option<String>,
    pinned: bool,
}

impl AssistantTools {
    /// Names the enabled tools of the servers that listed theirs uniquely.
    /// Tools a policy rule denies are left out (`decider`), and for a model the tools
    /// only a server's view may call.
    /// The user's curation (`overrides`) hides tools, renames them and replaces their
    /// descriptions.
    pub(crate) fn assemble(
        catalogs: Vec<ServerCatalog>,
        decider: &CallDecider,
        audience: Audience,
        overrides: &ToolOverrides,
    ) -> Self {
        let mut tools = Vec::new();
        let mut unavailable = Vec::new();
        for ServerCatalog { server_id, listing } in catalogs {
            match listing {
                Ok((runtime, catalog)) => {
                    let spec = &runtime.server.spec;
                    for tool in &catalog.tools {
                        let curated = overrides.get(runtime.server.id, &tool.name);
                        if curated.is_none_or(|o| !o.hidden)
                            && !spec.disabled_tools.iter().any(|t| *t == tool.name)
                            && (audience == Audience::ModelAndApps
                                || ToolUi::of(tool.meta.as_deref()).for_model)
                            && decider.offers(&runtime.server, tool)
                        {
                            let mut tool = tool.clone();
                            if let Some(description) = curated.and_then(|o| o.description.clone()) {
                                tool.description = Some(description.into());
                            }
                            tools.push(Curated {
                                runtime: runtime.clone(),
                                tool,
                                catalog: catalog.clone(),
                                alias: curated.and_then(|o| o.name.clone()),
                                pinned: curated.is_some_and(|o| o.pinned),
                            });
                        }
                    }
                }
                // The user switched it off: not an outage.
                Err(Error::ServerInactive) => {}
                Err(error) => unavailable.push(UnavailableServer { server_id, error }),
            }
        }
        let table = ToolNameTable::build_aliased(tools.iter().map(|t| {
            let tool = ToolRef {
                server_id: t.runtime.server.id,
                server_name: t.runtime.server.spec.name.as_str().to_owned(),
                tool: t.tool.name.to_string(),
            };
            (tool, t.alias.clone())
        }));
        let tools = table
            .iter()
            .zip(tools)
            .map(|((name, _), t)| AssistantTool {
                name: name.to_owned(),
                server: t.runtime,
                tool: t.tool,
                catalog: t.catalog,
                alias: t.alias,
                pinned: t.pinned,
            })
            .collect();
        AssistantTools {
            tools,
            table,
            unavailable,
        }
    }

    /// The tools the user pinned, in the listing's order (search mode offers them).
    pub fn pinned(&self) -> impl Iterator<Item = &AssistantTool> {
        self.tools.iter().filter(|t| t.pinned)
    }

    /// The tool a model-facing name stands for, through the name table.
    pub fn resolve(&self, name: &str) -> Option<&AssistantTool> {
        self.table.index_of(name).map(|i| &self.tools[i])
    }
}

impl UpstreamService {
    /// The enabled tools of every active server bound to the assistant that a model may
    /// call, named uniquely. A server that fails is reported in `unavailable` and does not
    /// hide the others.
    pub async fn assistant_tools(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<AssistantTools> {
        let decider = self.policies.decider(user, CallVia::Chat).await?;
        let overrides = self.bindings.tool_overrides(user, assistant).await?;
        Ok(AssistantTools::assemble(
            self.assistant_catalogs(user, assistant).await?,
            &decider,
            Audience::Model,
            &overrides,
        ))
    }

    /// How the assistant offers its tools to models (all, or a search over them).
    pub async fn tool_exposure(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<crate::domain::ToolExposure> {
        Ok(self.bindings.settings(user, assistant).await?.exposure)
    }

    /// Each server bound to the assistant (and each global one) with its live runtime and
    /// tool catalog, or why it has none. Cheap when all are connected: a lease and a
    /// cache lookup each.
    pub(crate) async fn assistant_catalogs(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Vec<ServerCatalog>> {
        let mut bound = (*self.bindings.get(user, assistant).await?).clone();
        bound.extend(self.globals.ids());
        Ok(futures::future::join_all(bound.iter().map(|id| async move {
            ServerCatalog {
                server_id: *id,
                listing: self.tools(user, &id.to_string()).await,
            }
        }))
        .await)
    }
}
