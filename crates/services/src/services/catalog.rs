//! The server catalog: `server.json` entries the operator imports (a file, a directory, a
//! Registry API) and enables, and from which users make servers in one call.
//!
//! Every document is validated against the Registry's published JSON Schema, pinned in
//! this directory: `server.schema.json` is, byte for byte, the schema published at
//! `https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json`, as the
//! registry's repository keeps it (`modelcontextprotocol/registry`,
//! `internal/validators/schemas/2025-12-11.json`, commit e361b5ff). Every
//! version is kept; users' servers follow the entry's latest version (or the operator's
//! pinned one, or their own pin) and resolve it again at each connect, so a new version
//! reaches them on their next connect.

mod registry;
mod seed;

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::operators::{Paging, search_term};
use crate::cluster::{Cluster, Note};
use crate::config::Settings;
use crate::domain::{
    CatalogEntry, CatalogUse, CatalogVersion, EntryKind, Field, MASK, McpServer, PackageRuntime,
    Resolved, Runnable, SecretMap, ServerJson, whole_match,
};
use crate::error::{Error, Resource, Result};
use crate::pool::Pool;
use crate::store::{CatalogSummary, Imported, Store};

pub use registry::{RegistrySync, SkippedEntry, SyncReport};

/// The Registry's schema for `server.json`, compiled once.
static SCHEMA: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    let schema: Value = serde_json::from_str(include_str!("catalog/server.schema.json"))
        .expect("the pinned server.json schema is JSON");
    jsonschema::draft7::new(&schema).expect("the pinned server.json schema compiles")
});

/// One page of a list, and how many rows match in all.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub page: u64,
    pub page_size: u64,
    pub total: u64,
}

/// What one import did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportedEntry {
    pub name: String,
    pub version: String,
    /// `created` (a new entry, disabled), `newVersion` or `replaced`.
    pub outcome: &'static str,
}

/// An entry with what a person needs to decide about it or use it.
#[derive(Debug, Clone)]
pub struct EntryDetail {
    pub entry: CatalogEntry,
    /// The version servers made now would run (the operator's pin, else the latest).
    pub version: String,
    /// What a user fills in, or why the entry cannot run here.
    pub fields: std::result::Result<Vec<Field>, String>,
    /// The document of that version.
    pub document: Value,
}

/// The operator's changes to an entry; absent fields stay as they are.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EntryUpdate {
    pub enabled: Option<bool>,
    /// A version to pin every user's server to; `null` unpins (servers follow the latest).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub pinned_version: Option<Option<String>>,
    /// Values fixed for everyone, by field name (users no longer see those fields).
    /// A value sent as `********` keeps the stored one; a name left out is removed.
    pub fixed: Option<BTreeMap<String, String>>,
    /// Field name → regular expression a user's whole value must match.
    pub patterns: Option<BTreeMap<String, String>>,
}

/// `Some(None)` for an explicit `null`, so "unpin" differs from "leave as is".
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

#[derive(Clone)]
pub struct CatalogService {
    store: Store,
    settings: Arc<Settings>,
    runtimes: Arc<BTreeMap<String, PackageRuntime>>,
    /// Where an entry's servers are stopped when what they run changes, so their next use
    /// resolves the entry again (none for the CLI: it holds no connections).
    live: Option<(Pool, Cluster)>,
}

impl CatalogService {
    pub fn new(store: Store, settings: Arc<Settings>) -> Self {
        let runtimes = settings
            .catalog
            .runtimes
            .iter()
            .map(|(kind, r)| {
                (
                    kind.clone(),
                    PackageRuntime {
                        command: r.command.clone(),
                        args: r.args.clone(),
                        package: r.package.clone(),
                        env: r.env.clone(),
                        sandbox: crate::domain::SandboxSpec {
                            read_only_paths: r.read_only_paths.clone(),
                            writable_paths: r.writable_paths.clone(),
                            ..Default::default()
                        },
                        allowed_runtime_flags: r.allowed_runtime_flags.clone(),
                        end_of_options: r.end_of_options,
                    },
                )
            })
            .collect();
        Self {
            store,
            settings,
            runtimes: Arc::new(runtimes),
            live: None,
        }
    }

    /// The same service stopping an entry's live servers, here and on other instances,
    /// when the version they run, the operator's values or the entry's state change.
    pub fn restarting(self, pool: Pool, cluster: Cluster) -> Self {
        Self {
            live: Some((pool, cluster)),
            ..self
        }
    }

    /// Stops the live connections of the servers made from `name` (only those following
    /// the entry's version when `followers_only`); their next use connects anew.
    async fn restart_servers(&self, name: &str, followers_only: bool) -> Result<()> {
        const PAGE: u64 = 500;
        let Some((pool, cluster)) = &self.live else {
            return Ok(());
        };
        let mut offset = 0;
        loop {
            let (servers, total) = self
                .store
                .servers()
                .using_catalog_entry(name, offset, PAGE)
                .await?;
            for server in &servers {
                let pinned = server
                    .spec
                    .catalog
                    .as_ref()
                    .is_some_and(|c| c.version.is_some());
                if followers_only && pinned {
                    continue;
                }
                pool.stop_server(&server.user_id, server.id).await;
                cluster.tell(Note::ServerChanged {
                    user: server.user_id.to_string(),
                    server: server.id,
                });
            }
            offset += PAGE;
            if servers.is_empty() || offset >= total {
                return Ok(());
            }
        }
    }

    /// Checks a document against the Registry's schema and what the pool needs of it.
    pub fn validate(document: &Value) -> Result<ServerJson> {
        let problems = crate::pool::schema_problems(&SCHEMA, document, "server.json");
        if !problems.is_empty() {
            return Err(Error::InvalidServerJson(problems));
        }
        let server = ServerJson::parse(document)?;
        server
            .check_packages(None)
            .map_err(|e| Error::InvalidServerJson(vec![e.to_string()]))?;
        // The Registry refuses ranges too; the schema only says "not latest".
        let ranged = |v: &str| {
            v.starts_with(['^', '~', '>', '<', '=']) || v.contains('*') || v.ends_with(".x")
        };
        if ranged(&server.version) {
            return Err(Error::InvalidServerJson(vec![format!(
                "/version: '{}' is a range; a catalog entry names one version",
                server.version
            )]));
        }
        for (i, package) in server.packages.iter().enumerate() {
            if let Some(version) = &package.version
                && ranged(version)
            {
                return Err(Error::InvalidServerJson(vec![format!(
                    "/packages/{i}/version: '{version}' is a range; name one version"
                )]));
            }
        }
        Ok(server)
    }

    /// Imports documents: all are validated first, so one invalid document imports none
    /// (its index says which).
    pub async fn import(&self, documents: Vec<Value>) -> Result<Vec<ImportedEntry>> {
        let several = documents.len() > 1;
        let mut parsed = Vec::with_capacity(documents.len());
        for (i, document) in documents.into_iter().enumerate() {
            let server = Self::validate(&document).map_err(|e| match e {
                Error::InvalidServerJson(problems) if several => Error::InvalidServerJson(
                    problems
                        .into_iter()
                        .map(|p| format!("document {i}: {p}"))
                        .collect(),
                ),
                other => other,
            })?;
            server.check_packages(Some(&self.runtimes)).map_err(|e| {
                let at = if several {
                    format!("document {i}: ")
                } else {
                    String::new()
                };
                Error::InvalidServerJson(vec![format!("{at}{e}")])
            })?;
            parsed.push((server, document));
        }
        let mut report = Vec::with_capacity(parsed.len());
        for (server, document) in parsed {
            report.push(self.store_version(&server, document).await?);
        }
        Ok(report)
    }

    async fn store_version(&self, server: &ServerJson, document: Value) -> Result<ImportedEntry> {
        let kind = match server.runnable(&self.runtimes) {
            Ok(Runnable::Remote(_)) => EntryKind::Remote,
            Ok(Runnable::Package(..)) => EntryKind::Package,
            Err(_) if server.packages.is_empty() => EntryKind::Remote,
            Err(_) => EntryKind::Package,
        };
        let tags = tags_of(server, &document);
        let version = CatalogVersion {
            name: server.name.clone(),
            version: server.version.clone(),
            document,
            imported_at: crate::domain::now(),
        };
        let (outcome, became_latest) = self
            .store
            .catalog()
            .import(
                &version,
                CatalogSummary {
                    title: server.title.as_deref().unwrap_or(""),
                    description: &server.description,
                    kind,
                    tags: &tags,
                },
            )
            .await?;
        tracing::info!(entry = %server.name, version = %server.version, ?outcome, "catalog entry imported");
        if became_latest && outcome != Imported::Created {
            self.restart_servers(&server.name, true).await?;
        }
        Ok(ImportedEntry {
            name: server.name.clone(),
            version: server.version.clone(),
            outcome: match outcome {
                Imported::Created => "created",
                Imported::NewVersion => "newVersion",
                Imported::Replaced => "replaced",
            },
        })
    }

    /// Imports the built-in entries into an empty catalog (a first start), all disabled.
    pub async fn seed(&self) -> Result<usize> {
        if !self.settings.catalog.seed || !self.store.catalog().is_empty().await? {
            return Ok(0);
        }
        let documents = seed::documents();
        let count = documents.len();
        self.import(documents).await?;
        tracing::info!(
            entries = count,
            "catalog seeded with the built-in entries (disabled)"
        );
        Ok(count)
    }

    /// Reads a Registry API (`/v0.1/servers`), page by page, and imports what it lists.
    pub async fn sync(&self, sync: RegistrySync) -> Result<registry::SyncReport> {
        let timeout = std::time::Duration::from_secs(self.settings.catalog.registry_timeout_secs);
        registry::sync(self, sync, timeout).await
    }

    pub async fn entry(&self, name: &str) -> Result<CatalogEntry> {
        self.store
            .catalog()
            .get(name)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::CatalogEntry, name.to_owned()))
    }

    async fn document(&self, name: &str, version: &str) -> Result<CatalogVersion> {
        self.store
            .catalog()
            .version(name, version)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::CatalogEntry, format!("{name}@{version}")))
    }

    /// An entry with its fields, for the operator (any entry) or a user (enabled only).
    pub async fn detail(&self, name: &str, enabled_only: bool) -> Result<EntryDetail> {
        let entry = self.entry(name).await?;
        if enabled_only && !entry.enabled {
            return Err(Error::NotFound(Resource::CatalogEntry, name.to_owned()));
        }
        self.describe(entry).await
    }

    async fn describe(&self, entry: CatalogEntry) -> Result<EntryDetail> {
        let version = entry.effective_version(None).to_owned();
        let document = self.document(&entry.name, &version).await?.document;
        let fields = ServerJson::parse(&document)
            .and_then(|server| server.fields(&self.runtimes, &entry))
            .map_err(|e| e.to_string());
        Ok(EntryDetail {
            entry,
            version,
            fields,
            document,
        })
    }

    /// A page of entries (`enabled_only` for users) and how many match.
    pub async fn search(
        &self,
        search: Option<String>,
        tag: Option<String>,
        enabled_only: bool,
        paging: Paging,
    ) -> Result<Page<EntryDetail>> {
        let (page, page_size) = paging.checked()?;
        let search = search_term(search)?;
        let tag = search_term(tag)?;
        let (entries, total) = self
            .store
            .catalog()
            .search(
                search.as_deref(),
                tag.as_deref(),
                enabled_only,
                page * page_size,
                page_size,
            )
            .await?;
        let mut items = Vec::with_capacity(entries.len());
        for entry in entries {
            items.push(self.describe(entry).await?);
        }
        Ok(Page {
            items,
            page,
            page_size,
            total,
        })
    }

    pub async fn versions(&self, name: &str) -> Result<Vec<String>> {
        Ok(self.store.catalog().versions(name).await?)
    }

    /// How many servers each entry has.
    pub async fn usage(&self) -> Result<BTreeMap<String, u64>> {
        Ok(self.store.servers().count_by_catalog_entry().await?)
    }

    /// The servers made from an entry, a page at a time.
    pub async fn users(&self, name: &str, paging: Paging) -> Result<Page<McpServer>> {
        self.entry(name).await?;
        let (page, page_size) = paging.checked()?;
        let (items, total) = self
            .store
            .servers()
            .using_catalog_entry(name, page * page_size, page_size)
            .await?;
        Ok(Page {
            items,
            page,
            page_size,
            total,
        })
    }

    /// Applies the operator's changes; enabling checks the entry can run here.
    pub async fn update(&self, name: &str, update: EntryUpdate) -> Result<EntryDetail> {
        let mut entry = self.entry(name).await?;
        if let Some(pin) = update.pinned_version {
            if let Some(version) = &pin {
                self.document(name, version).await?;
            }
            entry.pinned_version = pin;
        }
        if let Some(patterns) = update.patterns {
            for (field, pattern) in &patterns {
                whole_match(pattern)
                    .map_err(|e| Error::validation(format!("patterns.{field}: {e}")))?;
            }
            entry.patterns = patterns;
        }
        if let Some(fixed) = update.fixed {
            let mut merged = BTreeMap::new();
            for (field, value) in fixed {
                let value = if value == MASK {
                    entry.fixed.get(&field).map(str::to_owned).ok_or_else(|| {
                        Error::validation(format!(
                            "fixed.{field} is masked but no value is stored for it"
                        ))
                    })?
                } else {
                    value
                };
                merged.insert(field, value);
            }
            entry.fixed = SecretMap::new(merged);
        }
        if let Some(enabled) = update.enabled {
            entry.enabled = enabled;
        }
        // What the operator fixed or constrained must be inputs of the version servers run.
        let version = entry.effective_version(None).to_owned();
        let document = self.document(name, &version).await?.document;
        let server = ServerJson::parse(&document)?;
        let unfixed = CatalogEntry {
            fixed: SecretMap::default(),
            ..entry.clone()
        };
        match server.fields(&self.runtimes, &unfixed) {
            Ok(fields) => {
                let known = |name: &str| fields.iter().any(|f| f.name == name);
                for name in entry
                    .fixed
                    .keys()
                    .chain(entry.patterns.keys().map(String::as_str))
                {
                    if !known(name) {
                        return Err(Error::validation(format!(
                            "'{name}' is not an input of '{}' {version}",
                            entry.name
                        )));
                    }
                }
            }
            Err(cannot_run) if entry.enabled => {
                return Err(Error::validation(format!("cannot enable: {cannot_run}")));
            }
            Err(_) => {}
        }
        entry.updated_at = crate::domain::now();
        if !self.store.catalog().update_choices(&entry).await? {
            return Err(Error::NotFound(Resource::CatalogEntry, name.to_owned()));
        }
        tracing::info!(entry = %name, enabled = entry.enabled, pinned = ?entry.pinned_version, "catalog entry updated");
        self.restart_servers(name, false).await?;
        self.describe(entry).await
    }

    /// Removes an entry no server uses (409 `CONFLICT` otherwise).
    pub async fn delete(&self, name: &str) -> Result<()> {
        let users = self.users(name, Paging::default()).await?.total;
        if users > 0 {
            return Err(Error::Conflict(format!(
                "catalog entry '{name}' is used by {users} MCP server(s); delete them first or disable the entry"
            )));
        }
        if !self.store.catalog().delete(name).await? {
            return Err(Error::NotFound(Resource::CatalogEntry, name.to_owned()));
        }
        tracing::info!(entry = %name, "catalog entry deleted");
        Ok(())
    }

    /// What a server made from an entry runs now: the entry must be enabled, and the
    /// user's values must still fit the version in force.
    pub async fn resolve(&self, using: &CatalogUse) -> Result<Resolved> {
        let entry = self.entry(&using.entry).await?;
        if !entry.enabled {
            return Err(Error::CatalogEntryDisabled(entry.name));
        }
        let version = entry.effective_version(using.version.as_deref()).to_owned();
        let document = self.document(&entry.name, &version).await?.document;
        let server = ServerJson::parse(&document)?;
        server
            .resolve(
                &self.runtimes,
                &entry,
                &using.all_values(),
                self.settings.limits.max_value_bytes,
            )
            .map_err(|e| Error::validation(format!("{} {version}: {e}", entry.name)))
    }

    /// Splits a user's values into plain and secret by the entry's fields, carrying masked
    /// secrets over from `current`.
    pub async fn user_values(
        &self,
        name: &str,
        version: Option<&str>,
        given: BTreeMap<String, String>,
        current: Option<&CatalogUse>,
    ) -> Result<CatalogUse> {
        let entry = self.entry(name).await?;
        if !entry.enabled {
            return Err(Error::NotFound(Resource::CatalogEntry, name.to_owned()));
        }
        if let Some(version) = version {
            self.document(name, version).await?;
        }
        let effective = entry.effective_version(version).to_owned();
        let document = self.document(name, &effective).await?.document;
        let fields = ServerJson::parse(&document)?.fields(&self.runtimes, &entry)?;
        let mut values = BTreeMap::new();
        let mut secrets = BTreeMap::new();
        for (field, value) in given {
            let secret = fields.iter().any(|f| f.name == field && f.secret);
            if secret {
                let value = if value == MASK {
                    current
                        .and_then(|c| c.secrets.get(&field))
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            Error::validation(format!(
                                "values.{field} is masked but no value is stored for it"
                            ))
                        })?
                } else {
                    value
                };
                secrets.insert(field, value);
            } else {
                values.insert(field, value);
            }
        }
        Ok(CatalogUse {
            entry: name.to_owned(),
            version: version.map(str::to_owned),
            values,
            secrets: SecretMap::new(secrets),
        })
    }
}

/// Tags for search: the publisher's (`_meta…publisher-provided.tags` or `keywords`), the
/// registry types of its packages, and `remote` when it has one.
fn tags_of(server: &ServerJson, document: &Value) -> Vec<String> {
    let mut tags: Vec<String> = Vec::new();
    let provided = document
        .pointer("/_meta/io.modelcontextprotocol.registry~1publisher-provided")
        .cloned()
        .unwrap_or(Value::Null);
    for key in ["tags", "keywords"] {
        if let Some(list) = provided.get(key).and_then(Value::as_array) {
            tags.extend(
                list.iter()
                    .filter_map(Value::as_str)
                    .map(|t| t.trim().to_lowercase().replace(' ', "-")),
            );
        }
    }
    tags.extend(
        server
            .packages
            .iter()
            .map(|p| p.registry_type.to_lowercase()),
    );
    if !server.remotes.is_empty() {
        tags.push("remote".into());
    }
    tags.retain(|t| !t.is_empty() && t.len() <= 64);
    tags.sort();
    tags.dedup();
    tags
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_schema_refuses_a_document_and_says_where() {
        let err = CatalogService::validate(&json!({
            "name": "no-slash",
            "description": "d",
            "version": "1.0.0",
            "packages": [{"registryType": "npm", "identifier": "x"}]
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("/name"), "{err}");
        assert!(
            err.contains("/packages/0") && err.contains("transport"),
            "{err}"
        );
    }

    #[test]
    fn every_built_in_entry_is_valid() {
        for document in seed::documents() {
            CatalogService::validate(&document).unwrap_or_else(|e| panic!("{document}: {e}"));
        }
    }

    #[test]
    fn a_version_range_is_refused() {
        let err = CatalogService::validate(&json!({
            "name": "io.github.x/y", "description": "d", "version": "^1.0.0"
        }))
        .unwrap_err();
        assert!(err.to_string().contains("range"), "{err}");
    }
}
