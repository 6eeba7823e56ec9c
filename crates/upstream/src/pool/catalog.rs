//! Cached tool, resource and prompt lists, one entry per connection.
//!
//! Filled on first use (one upstream request however many callers miss at once), kept for
//! `pool.tool_cache_ttl_secs`, dropped on `notifications/*/list_changed`, on a server
//! change and on an explicit refresh. Tool input schemas are compiled once per fill.

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{Arc, Mutex, OnceLock, Weak};
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
        let without_nulls = self
            .get(name)
            .and_then(|tool| optional_nulls_left_out(&tool.input_schema, arguments));
        let arguments = without_nulls.as_ref().unwrap_or(arguments);
        let problems = schema_problems(validator, arguments, "arguments");
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

/// `arguments` without the optional properties given as null, when there are any: such an
/// argument counts as not given (models held to strict function schemas send null for
/// what they leave out, and 2026-07-28 sends no `Mcp-Param-*` header for it). Only the
/// check sees this; the server gets the arguments as sent.
fn optional_nulls_left_out(schema: &rmcp::model::JsonObject, arguments: &Value) -> Option<Value> {
    let given = arguments.as_object()?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let left_out =
        |(name, value): (&String, &Value)| value.is_null() && !required.contains(&name.as_str());
    if !given.iter().any(left_out) {
        return None;
    }
    let kept = given.iter().filter(|entry| !left_out(*entry));
    Some(Value::Object(
        kept.map(|(k, v)| (k.clone(), v.clone())).collect(),
    ))
}

pub struct ResourceCatalog {
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

/// Equal tool lists share one [`ToolCatalog`]. Every user of a preset or global server
/// gets the same list from it, and a copy per connection was the largest part of an idle
/// actor that we own (~20 KiB for the fixture's tools, measured with heaptrack under
/// `loadtest actors`; real servers' schemas are larger). Sharing also compiles a tool's
/// schema once for all its users. Only weak references are kept here: a catalog lives as
/// long as some connection's cache entry holds it.
#[derive(Default)]
struct SharedToolCatalogs {
    by_digest: Mutex<SharedIndex>,
}

#[derive(Default)]
struct SharedIndex {
    catalogs: HashMap<u64, Vec<Weak<ToolCatalog>>>,
    /// The index is swept of dead entries when it grows past this.
    sweep_at: usize,
}

/// Feeds serialized JSON into a hasher without building the string.
struct HashWriter<'a, H: Hasher>(&'a mut H);

impl<H: Hasher> std::io::Write for HashWriter<'_, H> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedToolCatalogs {
    /// The live catalog equal to `tools`, or a new one.
    fn intern(&self, tools: Vec<Tool>) -> Arc<ToolCatalog> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        if serde_json::to_writer(HashWriter(&mut hasher), &tools).is_err() {
            // Not serializable (it came from JSON, so this does not happen): keep it apart.
            return Arc::new(ToolCatalog::new(tools));
        }
        let digest = hasher.finish();
        let mut index = self.by_digest.lock().expect("catalog index lock");
        let bucket = index.catalogs.entry(digest).or_default();
        bucket.retain(|catalog| catalog.strong_count() > 0);
        if let Some(shared) = bucket
            .iter()
            .filter_map(Weak::upgrade)
            .find(|catalog| catalog.tools == tools)
        {
            return shared;
        }
        let catalog = Arc::new(ToolCatalog::new(tools));
        bucket.push(Arc::downgrade(&catalog));
        if index.catalogs.len() > index.sweep_at {
            index.catalogs.retain(|_, bucket| {
                bucket.retain(|catalog| catalog.strong_count() > 0);
                !bucket.is_empty()
            });
            index.sweep_at = (index.catalogs.len() * 2).max(64);
        }
        catalog
    }

    #[cfg(test)]
    fn live(&self) -> usize {
        let index = self.by_digest.lock().expect("catalog index lock");
        index
            .catalogs
            .values()
            .flatten()
            .filter(|catalog| catalog.strong_count() > 0)
            .count()
    }
}

pub struct Catalogs {
    tools: Cache<ConnectionKey, Arc<ToolCatalog>>,
    shared_tools: SharedToolCatalogs,
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
            shared_tools: SharedToolCatalogs::default(),
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
    ///
    /// The load is made and the miss awaited only on a miss, boxed: a hit's future (every
    /// tool call's) stays small instead of holding moka's loader and the list request.
    async fn cached<
        V: Clone + Send + Sync + 'static,
        Load: Future<Output = Result<V, PoolError>>,
    >(
        &self,
        cache: &Cache<ConnectionKey, V>,
        catalog: &'static str,
        lease: &Lease,
        load: impl FnOnce() -> Load,
    ) -> Result<V, PoolError> {
        if let Some(hit) = cache.get(&lease.key).await {
            self.metrics.catalog_lookup(catalog, true);
            return Ok(hit);
        }
        self.metrics.catalog_lookup(catalog, false);
        Box::pin(cache.try_get_with(lease.key.clone(), load()))
            .await
            .map_err(flatten)
    }

    pub async fn tools(&self, lease: &Lease) -> Result<Arc<ToolCatalog>, PoolError> {
        let timeout = lease.runtime.call_timeout;
        self.cached(&self.tools, "tools", lease, || async move {
            let tools = lease.client.list_tools(timeout).await?;
            Ok(self.shared_tools.intern(tools))
        })
        .await
    }

    pub async fn resources(&self, lease: &Lease) -> Result<Arc<ResourceCatalog>, PoolError> {
        let timeout = lease.runtime.call_timeout;
        let capabilities = lease.client.capabilities();
        self.cached(&self.resources, "resources", lease, || async move {
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
        self.cached(&self.prompts, "prompts", lease, || async move {
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

    #[test]
    fn equal_tool_lists_share_one_catalog_and_dropped_ones_are_forgotten() {
        let shared = SharedToolCatalogs::default();
        let list = || {
            vec![
                tool(
                    "add",
                    json!({"type": "object", "properties": {"a": {"type": "number"}}}),
                ),
                tool("echo", json!({"type": "object"})),
            ]
        };
        let first = shared.intern(list());
        let second = shared.intern(list());
        assert!(Arc::ptr_eq(&first, &second), "equal lists are one catalog");
        // A list that differs anywhere (here a schema) is its own catalog.
        let mut changed = list();
        changed[1] = tool("echo", json!({"type": "object", "required": ["text"]}));
        let other = shared.intern(changed);
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other.tools[1].input_schema["required"], json!(["text"]));
        assert_eq!(shared.live(), 2);
        // Validation works on the shared catalog for every holder.
        assert!(second.validate("add", &json!({"a": "x"})).is_err());
        assert!(first.validate("add", &json!({"a": 1})).is_ok());
        drop((first, second, other));
        assert_eq!(shared.live(), 0);
        let fresh = shared.intern(list());
        assert_eq!(fresh.tools.len(), 2);
        assert_eq!(shared.live(), 1);
    }
}
