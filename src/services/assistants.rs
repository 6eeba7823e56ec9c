//! Which of the user's servers each assistant uses.

use std::collections::HashSet;
use std::sync::Arc;

use uuid::Uuid;

use crate::config::Settings;
use crate::domain::{AssistantId, UserId};
use crate::error::{Error, Resource, Result};
use crate::store::Store;

#[derive(Clone)]
pub struct AssistantService {
    store: Store,
    settings: Arc<Settings>,
}

impl AssistantService {
    pub fn new(store: Store, settings: Arc<Settings>) -> Self {
        Self { store, settings }
    }

    pub async fn bound_servers(&self, user: &UserId, assistant: &AssistantId) -> Result<Vec<Uuid>> {
        Ok(self
            .store
            .assistants()
            .bound_servers(user, assistant)
            .await?)
    }

    /// Replaces the assistant's bindings; every id must be one of the caller's servers.
    pub async fn bind(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        server_ids: Vec<String>,
    ) -> Result<Vec<Uuid>> {
        let max = self.settings.limits.max_servers_per_assistant;
        if server_ids.len() > max {
            return Err(Error::LimitReached(format!(
                "an assistant may bind at most {max} MCP servers"
            )));
        }
        let mut seen = HashSet::new();
        let mut ids = Vec::with_capacity(server_ids.len());
        for raw in &server_ids {
            let id = Uuid::parse_str(raw)
                .map_err(|_| Error::NotFound(Resource::McpServer, raw.clone()))?;
            if seen.insert(id) {
                ids.push(id);
            }
        }
        let owned = self.store.servers().owned_ids(user, &ids).await?;
        if let Some(missing) = ids.iter().find(|id| !owned.contains(id)) {
            return Err(Error::NotFound(Resource::McpServer, missing.to_string()));
        }
        self.store
            .assistants()
            .replace(user, assistant, &ids)
            .await?;
        Ok(ids)
    }
}
