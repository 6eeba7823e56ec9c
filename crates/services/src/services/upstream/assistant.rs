//! An assistant's tools across its bound servers (and the global ones), named uniquely;
//! one server failing does not hide the others.

use std::sync::Arc;

use uuid::Uuid;

use super::UpstreamService;
use crate::domain::tool_name::{ToolNameTable, ToolRef};
use crate::domain::{AssistantId, CallVia, UserId};
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

/// One bound server's part of an assistant's tools.
pub struct ServerCatalog {
    pub server_id: Uuid,
    pub listing: Result<(Arc<ServerRuntime>, Arc<ToolCatalog>)>,
}

impl AssistantTools {
    /// Names the enabled tools of the servers that listed theirs uniquely.
    /// Tools a policy rule denies are left out (`decider`).
    pub(crate) fn assemble(catalogs: Vec<ServerCatalog>, decider: &CallDecider) -> Self {
        let mut tools = Vec::new();
        let mut unavailable = Vec::new();
        for ServerCatalog { server_id, listing } in catalogs {
            match listing {
                Ok((runtime, catalog)) => {
                    let spec = &runtime.server.spec;
                    for tool in &catalog.tools {
                        if !spec.disabled_tools.iter().any(|t| *t == tool.name)
                            && decider.offers(&runtime.server, tool)
                        {
                            tools.push((runtime.clone(), tool.clone(), catalog.clone()));
                        }
                    }
                }
                // The user switched it off: not an outage.
                Err(Error::ServerInactive) => {}
                Err(error) => unavailable.push(UnavailableServer { server_id, error }),
            }
        }
        let table = ToolNameTable::build(tools.iter().map(|(runtime, tool, _)| ToolRef {
            server_id: runtime.server.id,
            server_name: runtime.server.spec.name.as_str().to_owned(),
            tool: tool.name.to_string(),
        }));
        let tools = table
            .iter()
            .zip(tools)
            .map(|((name, _), (server, tool, catalog))| AssistantTool {
                name: name.to_owned(),
                server,
                tool,
                catalog,
            })
            .collect();
        AssistantTools {
            tools,
            table,
            unavailable,
        }
    }

    /// The tool a model-facing name stands for, through the name table.
    pub fn resolve(&self, name: &str) -> Option<&AssistantTool> {
        self.table.index_of(name).map(|i| &self.tools[i])
    }
}

impl UpstreamService {
    /// The enabled tools of every active server bound to the assistant, named uniquely.
    /// A server that fails is reported in `unavailable` and does not hide the others.
    pub async fn assistant_tools(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<AssistantTools> {
        let decider = self.policies.decider(user, CallVia::Chat).await?;
        Ok(AssistantTools::assemble(
            self.assistant_catalogs(user, assistant).await?,
            &decider,
        ))
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
