//! Cached tool, resource and prompt lists, one entry per connection.
//!
//! Filled on first use (one upstream request however many callers miss at once), kept for
//! `pool.tool_cache_ttl_secs`, dropped on `notifications/*/list_changed`, on a server
//! change and on an explicit refresh. Tool input schemas are compiled once per fill.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use moka::future::Cache;
use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};
use serde_json::Value;

use super::{ConnectionKey, Lease, PoolError};
use crate::metrics::Metrics;

/// A server's tools. Input schemas are compiled on a tool's first call, not on listing:
/// most listed tools are never called, and eager compilation cost tens of KiB per
/// connection (measured with `loadtest actors`).
pub struct ToolCatalog {
    pub tools: Vec<Tool>,
    validators: Vec<OnceLock<Option<jsonschema::Validator>>>,
}

impl ToolCatalog {
    pub fn new(tools: Vec<Tool>) -> Self {
        let validators = tools.iter().map(|_| OnceLock::new()).collect();
        Self { tools, validators }
    }

    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    fn validator(&self, name: &str) -> Option<&jsonschema::Validator> {
        let index = self.tools.iter().position(|t| t.name == name)?;
        self.validators[index]
            .get_or_init(|| {
                let tool = &self.tools[index];
                let schema = Value::Object((*tool.input_schema).clone());
                jsonschema::validator_for(&schema)
                    .inspect_err(|e| {
                        // An unusable schema is the server's problem: let the server judge.
                        tracing::warn!(tool = %tool.name, error = %e, "tool inputSchema does not compile; arguments go unchecked");
                    })
                    .ok()
            })
            .as_ref()
    }

    /// Every way `arguments` break the tool's schema, as `path: message` lines.
    pub fn validate(&self, name: &str, arguments: &Value) -> Result<(), Vec<String>> {
        let Some(validator) = self.validator(name) else {
            return Ok(());
        };
        let problems = schema_problems(validator, arguments, "arguments");
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

pub struct ResourceCatalog {
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

pub struct Catalogs {
    tools: Cache<ConnectionKey, Arc<ToolCatalog>>,
    resources: Cache<ConnectionKey, Arc<ResourceCatalog>>,
    prompts: Cache<ConnectionKey, Arc<Vec<Prompt>>>,
    /// Connections whose lists were dropped (list_changed, a config change, a refresh):
    /// the gateway tells its clients to list again.
    changes: tokio::sync::broadcast::Sender<ConnectionKey>,
    /// What servers announce for their listeners: log messages, resource updates.
    notices: tokio::sync::broadcast::Sender<Arc<UpstreamNotice>>,
    metrics: Arc<Metrics>,
}

/// An announcement of one connection's server, for whoever listens (gateway sessions).
#[derive(Debug)]
pub struct UpstreamNotice {
    pub key: ConnectionKey,
    pub event: crate::mcp::UpstreamEvents,
}

fn flatten(error: Arc<PoolError>) -> PoolError {
    (*error).clone()
}

impl Catalogs {
    pub fn new(ttl: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            tools: Cache::builder()
                .time_to_live(ttl)
                .max_capacity(100_000)
                .build(),
            resources: Cache::builder()
                .time_to_live(ttl)
                .max_capacity(100_000)
                .build(),
            prompts: Cache::builder()
                .time_to_live(ttl)
                .max_capacity(100_000)
                .build(),
            changes: tokio::sync::broadcast::channel(1024).0,
            notices: tokio::sync::broadcast::channel(1024).0,
            metrics,
        }
    }

    pub fn subscribe_changes(&self) -> tokio::sync::broadcast::Receiver<ConnectionKey> {
        self.changes.subscribe()
    }

    pub fn subscribe_notices(&self) -> tokio::sync::broadcast::Receiver<Arc<UpstreamNotice>> {
        self.notices.subscribe()
    }

    /// Passes a server's announcement on; nobody listening is fine.
    pub fn announce(&self, key: &ConnectionKey, event: crate::mcp::UpstreamEvents) {
        let _ = self.notices.send(Arc::new(UpstreamNotice {
            key: key.clone(),
            event,
        }));
    }

    /// `cache`'s entry for the lease's connection, loading it once on a miss (concurrent
    /// misses share one load); hits and misses are counted under `catalog`.
    async fn cached<V: Clone + Send + Sync + 'static>(
        &self,
        cache: &Cache<ConnectionKey, V>,
        catalog: &'static str,
        lease: &Lease,
        load: impl Future<Output = Result<V, PoolError>>,
    ) -> Result<V, PoolError> {
        if let Some(hit) = cache.get(&lease.key).await {
            self.metrics.catalog_lookup(catalog, true);
            return Ok(hit);
        }
        self.metrics.catalog_lookup(catalog, false);
        cache
            .try_get_with(lease.key.clone(), load)
            .await
            .map_err(flatten)
    }

    pub async fn tools(&self, lease: &Lease) -> Result<Arc<ToolCatalog>, PoolError> {
        let timeout = lease.runtime.call_timeout;
        self.cached(&self.tools, "tools", lease, async {
            let tools = lease.client.list_tools(timeout).await?;
            Ok(Arc::new(ToolCatalog::new(tools)))
        })
        .await
    }

    pub async fn resources(&self, lease: &Lease) -> Result<Arc<ResourceCatalog>, PoolError> {
        let timeout = lease.runtime.call_timeout;
        let capabilities = lease.client.capabilities();
        self.cached(&self.resources, "resources", lease, async {
            if !capabilities.resources {
                return Ok(Arc::new(ResourceCatalog {
                    resources: Vec::new(),
                    templates: Vec::new(),
                }));
            }
            let resources = lease.client.list_resources(timeout).await?;
            // Templates are optional in the protocol: a server without them may refuse.
            let templates = lease
                .client
                .list_resource_templates(timeout)
                .await
                .unwrap_or_default();
            Ok(Arc::new(ResourceCatalog {
                resources,
                templates,
            }))
        })
        .await
    }

    pub async fn prompts(&self, lease: &Lease) -> Result<Arc<Vec<Prompt>>, PoolError> {
        let timeout = lease.runtime.call_timeout;
        let capabilities = lease.client.capabilities();
        self.cached(&self.prompts, "prompts", lease, async {
            if !capabilities.prompts {
                return Ok(Arc::new(Vec::new()));
            }
            Ok(Arc::new(lease.client.list_prompts(timeout).await?))
        })
        .await
    }

    pub async fn invalidate_tools(&self, key: &ConnectionKey) {
        self.tools.invalidate(key).await;
        let _ = self.changes.send(key.clone());
    }

    /// Drops what was cached for a connection that stopped, without announcing a change:
    /// the lists did not change, the session they came from is gone.
    pub async fn forget(&self, key: &ConnectionKey) {
        self.tools.invalidate(key).await;
        self.resources.invalidate(key).await;
        self.prompts.invalidate(key).await;
    }

    /// Drops a connection's lists and tells the gateway's clients to list again.
    pub async fn invalidate(&self, key: &ConnectionKey) {
        self.forget(key).await;
        let _ = self.changes.send(key.clone());
    }
}

/// Every way `value` breaks a schema, as `path: message` lines (at most 20); the root is
/// called `root`.
pub fn schema_problems(
    validator: &jsonschema::Validator,
    value: &Value,
    root: &str,
) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(20)
        .map(|e| {
            let path = e.instance_path().as_str();
            let path = if path.is_empty() { root } else { path };
            format!("{path}: {e}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &'static str, schema: Value) -> Tool {
        Tool::new(name, "t", Arc::new(schema.as_object().unwrap().clone()))
    }

    #[test]
    fn arguments_are_checked_against_the_input_schema() {
        let catalog = ToolCatalog::new(vec![tool(
            "add",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        )]);
        assert!(catalog.validate("add", &json!({"a": 1, "b": 2})).is_ok());
        let problems = catalog.validate("add", &json!({"a": "one"})).unwrap_err();
        assert!(problems.iter().any(|p| p.contains("/a")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("\"b\"")), "{problems:?}");
        assert!(catalog.validate("unknown", &json!({})).is_ok());
    }
}
