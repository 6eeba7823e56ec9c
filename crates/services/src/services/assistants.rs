//! Which of the user's servers each assistant uses.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use moka::future::Cache;

use uuid::Uuid;

use crate::cluster::{Cluster, Note};
use crate::config::Settings;
use crate::domain::tool_name::PrefixMode;
use crate::domain::{AssistantId, ToolExposure, ToolOverride, ToolOverrides, UserId};
use crate::error::{Error, Resource, Result};
use crate::store::Store;

/// Bound server ids by (user, assistant): every chat round, gateway call and tool-calls
/// request needs them, and they change rarely. Changes made on this instance apply at
/// once and are told to the other instances (which also drop entries after
/// [`BINDINGS_TTL`], should a note be missed).
#[derive(Clone)]
pub struct BindingCache {
    store: Store,
    cache: Cache<(UserId, AssistantId), Arc<Vec<Uuid>>>,
    /// Each assistant's settings (one lookup per gateway call for all of them).
    settings: Cache<(UserId, AssistantId), Arc<AssistantSettings>>,
    cluster: Cluster,
}

pub const BINDINGS_TTL: Duration = Duration::from_secs(5);

/// An assistant's settings as its calls read them.
#[derive(Debug, Default)]
pub struct AssistantSettings {
    /// Its own gateway prefix mode (`None`: `gateway.prefix`).
    pub prefix: Option<PrefixMode>,
    /// Its tool curation.
    pub overrides: Arc<ToolOverrides>,
    /// How it offers its tools to models.
    pub exposure: ToolExposure,
}

/// `cache`'s entry for the assistant, loaded on a miss (concurrent misses share one load).
/// Every gateway call looks up twice: a hit is a plain `get`, and the loader is awaited
/// boxed, so the lookup's future stays small instead of holding moka's (~5 KB), which
/// each caller's future would hold and copy in turn.
async fn cached<V: Clone + Send + Sync + 'static, Load: Future<Output = Result<V>>>(
    cache: &Cache<(UserId, AssistantId), V>,
    user: &UserId,
    assistant: &AssistantId,
    load: impl FnOnce() -> Load,
) -> Result<V> {
    let key = (user.clone(), assistant.clone());
    if let Some(hit) = cache.get(&key).await {
        return Ok(hit);
    }
    Box::pin(cache.try_get_with(key, load()))
        .await
        .map_err(Error::unshare)
}

impl BindingCache {
    pub fn new(store: Store, cluster: Cluster) -> Self {
        Self {
            store,
            cluster,
            cache: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(BINDINGS_TTL)
                .build(),
            settings: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(BINDINGS_TTL)
                .build(),
        }
    }

    /// The assistant's settings: its own gateway prefix mode and its tool overrides.
    pub async fn settings(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Arc<AssistantSettings>> {
        cached(&self.settings, user, assistant, || async {
            let stored = self.store.assistants().settings(user, assistant).await?;
            Ok(Arc::new(AssistantSettings {
                prefix: stored.gateway_prefix.as_deref().and_then(PrefixMode::parse),
                overrides: Arc::new(stored.overrides),
                exposure: stored
                    .tool_exposure
                    .as_deref()
                    .and_then(ToolExposure::parse)
                    .unwrap_or_default(),
            }))
        })
        .await
    }

    /// The assistant's tool overrides (none: empty).
    pub async fn tool_overrides(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Arc<ToolOverrides>> {
        Ok(self.settings(user, assistant).await?.overrides.clone())
    }

    /// The assistant's own gateway prefix mode, if it has one.
    pub async fn gateway_prefix(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Option<PrefixMode>> {
        Ok(self.settings(user, assistant).await?.prefix)
    }

    pub async fn get(&self, user: &UserId, assistant: &AssistantId) -> Result<Arc<Vec<Uuid>>> {
        cached(&self.cache, user, assistant, || async {
            let ids = self
                .store
                .assistants()
                .bound_servers(user, assistant)
                .await?;
            Ok(Arc::new(ids))
        })
        .await
    }

    pub async fn forget(&self, user: &UserId, assistant: &AssistantId) {
        let key = (user.clone(), assistant.clone());
        self.cache.invalidate(&key).await;
        self.settings.invalidate(&key).await;
        self.cluster.tell(Note::BindingsChanged);
    }

    /// After a server was deleted (it is unbound from every assistant).
    pub(crate) fn forget_all(&self) {
        self.forget_here();
        self.cluster.tell(Note::BindingsChanged);
    }

    /// Bindings changed on another instance.
    pub(crate) fn forget_here(&self) {
        self.cache.invalidate_all();
        self.settings.invalidate_all();
    }
}

#[derive(Clone)]
pub struct AssistantService {
    store: Store,
    settings: Arc<Settings>,
    bindings: BindingCache,
}

impl AssistantService {
    pub fn new(store: Store, settings: Arc<Settings>, bindings: BindingCache) -> Self {
        Self {
            store,
            settings,
            bindings,
        }
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
        let owned = self.store.servers().usable_ids(user, &ids).await?;
        if let Some(missing) = ids.iter().find(|id| !owned.contains(id)) {
            return Err(Error::NotFound(Resource::McpServer, missing.to_string()));
        }
        self.store
            .assistants()
            .replace(user, assistant, &ids)
            .await?;
        self.bindings.forget(user, assistant).await;
        Ok(ids)
    }

    /// The assistant's own gateway prefix mode (`None`: it follows `gateway.prefix`).
    pub async fn gateway_prefix(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Option<PrefixMode>> {
        self.bindings.gateway_prefix(user, assistant).await
    }

    /// Sets (or with `None` clears) the assistant's gateway prefix mode; live gateway
    /// sessions see the new names at their next listing.
    pub async fn set_gateway_prefix(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        prefix: Option<&str>,
    ) -> Result<Option<PrefixMode>> {
        let mode = match prefix {
            None => None,
            Some(raw) => Some(PrefixMode::parse(raw).ok_or_else(|| {
                Error::validation(format!(
                    "prefix '{raw}' is not one of always, on_collision, never"
                ))
            })?),
        };
        self.store
            .assistants()
            .set_gateway_prefix(user, assistant, mode.map(PrefixMode::as_str))
            .await?;
        self.bindings.forget(user, assistant).await;
        Ok(mode)
    }

    /// The assistant's tool overrides, in the order they were given.
    pub async fn tool_overrides(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Arc<ToolOverrides>> {
        self.bindings.tool_overrides(user, assistant).await
    }

    /// Replaces the assistant's tool overrides; each names one of the caller's servers
    /// (bound or not: the override waits for the binding). Live gateway sessions and the
    /// next chat round see them at once on this instance, within seconds on the others.
    pub async fn set_tool_overrides(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        entries: Vec<ToolOverride>,
    ) -> Result<Arc<ToolOverrides>> {
        let overrides = ToolOverrides::new(entries)?;
        let ids: Vec<Uuid> = overrides
            .entries()
            .iter()
            .map(|o| o.server_id)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let usable = self.store.servers().usable_ids(user, &ids).await?;
        if let Some((i, entry)) = overrides
            .entries()
            .iter()
            .enumerate()
            .find(|(_, o)| !usable.contains(&o.server_id))
        {
            return Err(Error::validation(format!(
                "overrides[{i}].serverId: {} is not one of your MCP servers",
                entry.server_id
            )));
        }
        self.store
            .assistants()
            .set_tool_overrides(user, assistant, &overrides)
            .await?;
        self.bindings.forget(user, assistant).await;
        Ok(Arc::new(overrides))
    }

    /// How the assistant offers its tools to models.
    pub async fn tool_exposure(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<ToolExposure> {
        Ok(self.bindings.settings(user, assistant).await?.exposure)
    }

    /// Sets how the assistant offers its tools to models (`all` or `search`).
    pub async fn set_tool_exposure(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        raw: &str,
    ) -> Result<ToolExposure> {
        let exposure = ToolExposure::parse(raw).ok_or_else(|| {
            Error::validation(format!("toolExposure '{raw}' is not one of all, search"))
        })?;
        self.store
            .assistants()
            .set_tool_exposure(user, assistant, Some(exposure.as_str()))
            .await?;
        self.bindings.forget(user, assistant).await;
        Ok(exposure)
    }
}
