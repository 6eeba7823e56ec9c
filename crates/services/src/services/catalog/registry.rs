//! Import from a Registry API (the MCP Registry's `GET /v0.1/servers`): page by page with
//! its cursor, optionally only what changed since a time. Documents the schema refuses are
//! skipped and reported, not fatal: one bad publisher must not stop an operator's sync.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CatalogService, ImportedEntry};
use crate::error::{Error, Result};

/// Pages read at most in one sync (100 servers each): a registry that never stops paging
/// cannot keep the request open for ever.
const MAX_PAGES: usize = 1_000;
const PAGE_SIZE: u32 = 100;

/// Which registry to read, and from when.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistrySync {
    /// The registry's base URL, e.g. `https://registry.modelcontextprotocol.io`.
    pub registry: String,
    /// Only servers updated since this time (RFC 3339).
    pub updated_since: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    pub pages: usize,
    pub imported: Vec<ImportedEntry>,
    /// Listed by the registry but refused: name, version and why.
    pub skipped: Vec<SkippedEntry>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SkippedEntry {
    pub name: String,
    pub version: String,
    pub reason: String,
}

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    servers: Vec<Listed>,
    #[serde(default)]
    metadata: Metadata,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    next_cursor: Option<String>,
}

#[derive(Deserialize)]
struct Listed {
    server: Value,
    #[serde(rename = "_meta", default)]
    meta: Value,
}

pub(super) async fn sync(
    catalog: &CatalogService,
    sync: RegistrySync,
    timeout: Duration,
) -> Result<SyncReport> {
    let base = url::Url::parse(sync.registry.trim())
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| Error::validation("registry must be an http(s) URL"))?;
    let endpoint = base
        .join(&format!(
            "{}/v0.1/servers",
            base.path().trim_end_matches('/')
        ))
        .map_err(|e| Error::validation(format!("registry: {e}")))?;
    // The operator's own registry, named in an admin request: not a URL a user or a server
    // chose, so not under the URL policy (a company registry is often internal).
    // tests/api/outbound.rs lists this as such a client.
    #[allow(clippy::disallowed_methods)]
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| Error::Unexpected(e.into()))?;
    let mut report = SyncReport {
        pages: 0,
        imported: Vec::new(),
        skipped: Vec::new(),
    };
    let mut cursor: Option<String> = None;
    while report.pages < MAX_PAGES {
        let mut url = endpoint.clone();
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("limit", &PAGE_SIZE.to_string());
            if let Some(cursor) = &cursor {
                query.append_pair("cursor", cursor);
            }
            if let Some(since) = sync.updated_since {
                query.append_pair("updated_since", &since.to_rfc3339());
            }
        }
        let page = read_page(&http, &url).await?;
        report.pages += 1;
        for listed in page.servers {
            let status = listed
                .meta
                .pointer("/io.modelcontextprotocol.registry~1official/status")
                .and_then(Value::as_str);
            if status == Some("deleted") {
                continue;
            }
            let name = text(&listed.server, "name");
            let version = text(&listed.server, "version");
            match catalog.import(vec![listed.server]).await {
                Ok(mut imported) => report.imported.append(&mut imported),
                Err(Error::InvalidServerJson(problems)) => report.skipped.push(SkippedEntry {
                    name,
                    version,
                    reason: problems.join("; "),
                }),
                Err(other) => return Err(other),
            }
        }
        cursor = page.metadata.next_cursor.filter(|c| !c.is_empty());
        if cursor.is_none() {
            break;
        }
    }
    tracing::info!(registry = %base, pages = report.pages, imported = report.imported.len(), skipped = report.skipped.len(), "registry synced");
    Ok(report)
}

async fn read_page(http: &reqwest::Client, url: &url::Url) -> Result<Page> {
    let unavailable = |what: String| Error::RegistryUnavailable(format!("{url}: {what}"));
    let response = http
        .get(url.clone())
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| unavailable(crate::mcp::error_chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(unavailable(format!("answered HTTP {status}")));
    }
    response
        .json::<Page>()
        .await
        .map_err(|e| unavailable(format!("the answer is not a server list: {e}")))
}

fn text(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned()
}
