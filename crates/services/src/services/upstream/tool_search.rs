//! Tool search: an assistant's tools ranked against a query (`domain::tool_search`). Each
//! assistant's index is kept while its tools stay the same, and built again on the first
//! search after they change (a `list_changed`, a binding, a rule or the user's curation).
//!
//! With a sentence encoder configured, each tool's vector is kept by the text it was
//! encoded from, so a tool shared by many users' servers (the same GitHub server for
//! everyone) is encoded once, and an index rebuilt after one server changed encodes only
//! that server's tools. Encoding runs on the blocking pool, off the async workers.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{AssistantTools, Audience, UpstreamService};
use rmcp::model::JsonObject;

use crate::domain::tool_search::{
    DEFAULT_SEARCH_RESULTS, Ranked, SentenceEncoder, ToolDocument, ToolIndex,
};
use crate::domain::{AssistantId, UserId};
use crate::error::{Error, Result};

/// The longest query searched (characters): a question, not a document.
pub const MAX_QUERY_CHARS: usize = 1_000;
/// The most tools one search returns.
pub const MAX_RESULTS: usize = 100;

/// Each assistant's index, by who its tools were listed for.
#[derive(Clone)]
pub(crate) struct ToolIndexes {
    kept: moka::sync::Cache<(UserId, AssistantId, Audience), Arc<KeptIndex>>,
    meanings: Option<Meanings>,
}

/// The sentence encoder and the vectors it made, by the text each was made from.
#[derive(Clone)]
struct Meanings {
    encoder: Arc<SentenceEncoder>,
    by_text: moka::sync::Cache<String, Arc<[f32]>>,
}

impl Meanings {
    /// The vectors of `texts`, in order: those kept, the others encoded (and kept), all on
    /// the blocking pool.
    async fn of(&self, texts: Vec<String>) -> Result<Vec<Arc<[f32]>>> {
        let meanings = self.clone();
        Ok(tokio::task::spawn_blocking(move || {
            texts
                .into_iter()
                .map(|text| {
                    let encode = || -> Arc<[f32]> { meanings.encoder.encode(&text).into() };
                    meanings.by_text.get_with_by_ref(text.as_str(), encode)
                })
                .collect()
        })
        .await
        .map_err(|error| anyhow::anyhow!("encoding the tools for search failed: {error}"))?)
    }

    async fn of_query(&self, query: &str) -> Result<Vec<f32>> {
        let encoder = self.encoder.clone();
        let query = query.to_owned();
        Ok(tokio::task::spawn_blocking(move || encoder.encode(&query))
            .await
            .map_err(|error| anyhow::anyhow!("encoding the search query failed: {error}"))?)
    }
}

struct KeptIndex {
    /// What the tools it was built from looked like (`AssistantTools::fingerprint`).
    fingerprint: u64,
    index: ToolIndex,
}

/// Tools' vectors kept: 2 KiB each, so about 200 MiB at most.
const KEPT_VECTORS: u64 = 100_000;

impl ToolIndexes {
    /// Loads the sentence encoder from `model_dir`, if one is configured.
    pub(crate) async fn new(model_dir: Option<&std::path::Path>) -> Result<Self> {
        let meanings = match model_dir {
            None => None,
            Some(dir) => {
                let dir = dir.to_owned();
                let encoder = tokio::task::spawn_blocking(move || SentenceEncoder::load(&dir))
                    .await
                    .map_err(|error| anyhow::anyhow!("loading the tool search model: {error}"))?
                    .map_err(anyhow::Error::from)?;
                Some(Meanings {
                    encoder: Arc::new(encoder),
                    by_text: moka::sync::Cache::builder()
                        .max_capacity(KEPT_VECTORS)
                        .build(),
                })
            }
        };
        Ok(ToolIndexes {
            kept: moka::sync::Cache::builder()
                .max_capacity(10_000)
                // An assistant nobody searches for an hour gives its memory back.
                .time_to_idle(Duration::from_secs(3_600))
                .build(),
            meanings,
        })
    }
}

/// A query as searched: trimmed, not empty, not too long.
pub fn checked_query(query: &str) -> Result<&str> {
    let query = query.trim();
    if query.is_empty() {
        return Err(Error::validation("the search query is empty"));
    }
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(Error::validation(format!(
            "the search query is longer than {MAX_QUERY_CHARS} characters"
        )));
    }
    Ok(query)
}

/// How many results a search returns: `limit`, else `default`, within 1 to
/// [`MAX_RESULTS`].
pub fn checked_limit(limit: Option<u64>, default: usize) -> Result<usize> {
    match limit {
        None => Ok(default),
        Some(limit) if (1..=MAX_RESULTS as u64).contains(&limit) => Ok(limit as usize),
        Some(limit) => Err(Error::validation(format!(
            "limit {limit} is not between 1 and {MAX_RESULTS}"
        ))),
    }
}

impl AssistantTools {
    /// Changes whenever anything a tool is searched by changes. A server's catalog is
    /// replaced (a new `Arc`) when it lists its tools again; names, aliases and
    /// descriptions carry the user's curation.
    fn fingerprint(&self) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        self.tools.len().hash(&mut hasher);
        for tool in &self.tools {
            tool.server.server.id.hash(&mut hasher);
            tool.server.server.spec.name.as_str().hash(&mut hasher);
            (Arc::as_ptr(&tool.catalog) as usize).hash(&mut hasher);
            tool.tool.name.hash(&mut hasher);
            tool.alias.hash(&mut hasher);
            tool.tool.description.hash(&mut hasher);
        }
        hasher.finish()
    }

    fn documents(&self) -> impl Iterator<Item = ToolDocument<'_>> {
        self.tools.iter().map(|tool| ToolDocument {
            server: tool.server.server.spec.name.as_str(),
            name: &tool.tool.name,
            alias: tool.alias.as_deref(),
            title: tool.tool.title.as_deref(),
            description: tool.tool.description.as_deref(),
            input_schema: &tool.tool.input_schema,
        })
    }
}

impl UpstreamService {
    /// The `limit` tools of `listing` (the assistant's, listed for `audience`) that answer
    /// `query` best, best first, by their place in `listing.tools`.
    pub async fn rank_tools(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        audience: Audience,
        listing: &AssistantTools,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Ranked>> {
        let indexes = &self.tool_indexes;
        let fingerprint = listing.fingerprint();
        let key = (user.clone(), assistant.clone(), audience);
        let kept = match indexes.kept.get(&key) {
            Some(kept) if kept.fingerprint == fingerprint => kept,
            _ => {
                let mut index = ToolIndex::build(listing.documents());
                if let Some(meanings) = &indexes.meanings {
                    let texts = listing.documents().map(|d| d.meaning_text()).collect();
                    index = index.with_meanings(meanings.of(texts).await?);
                }
                let kept = Arc::new(KeptIndex { fingerprint, index });
                indexes.kept.insert(key, kept.clone());
                kept
            }
        };
        let meaning = match &indexes.meanings {
            Some(meanings) if !kept.index.is_empty() => Some(meanings.of_query(query).await?),
            _ => None,
        };
        Ok(kept.index.rank(query, meaning.as_deref(), limit))
    }
}

/// What `search_tools` answers a model: each found tool by the name it calls it by (with
/// `call_tool`), what it does and its parameters.
pub fn found_tools<'a>(
    listing: &'a AssistantTools,
    ranked: &[Ranked],
    name_of: impl Fn(usize) -> Option<&'a str>,
) -> Value {
    let tools: Vec<Value> = ranked
        .iter()
        .filter_map(|found| {
            let tool = &listing.tools[found.position];
            Some(json!({
                "name": name_of(found.position)?,
                "description": tool.tool.description.as_deref().unwrap_or(""),
                "inputSchema": Value::Object((*tool.tool.input_schema).clone()),
            }))
        })
        .collect();
    json!({ "tools": tools })
}

/// What a model asks `search_tools` for.
pub struct SearchArguments {
    pub query: String,
    pub limit: usize,
}

/// The most tools one `search_tools` call returns.
const MAX_SEARCH_TOOLS_RESULTS: u64 = 20;

impl SearchArguments {
    pub fn of(mut arguments: JsonObject) -> Result<Self> {
        let query = match arguments.remove("query") {
            Some(Value::String(query)) => checked_query(&query)?.to_owned(),
            _ => return Err(Error::validation("search_tools needs a query: a string")),
        };
        let limit = match arguments.remove("limit") {
            None | Some(Value::Null) => DEFAULT_SEARCH_RESULTS,
            Some(limit) => match limit.as_u64() {
                Some(n) if (1..=MAX_SEARCH_TOOLS_RESULTS).contains(&n) => n as usize,
                _ => {
                    return Err(Error::validation(format!(
                        "search_tools' limit must be a whole number from 1 to {MAX_SEARCH_TOOLS_RESULTS}"
                    )));
                }
            },
        };
        Ok(SearchArguments { query, limit })
    }
}

/// The tool `call_tool` names and its arguments.
pub fn called_through(mut arguments: JsonObject) -> Result<(String, Option<JsonObject>)> {
    let name = match arguments.remove("name") {
        Some(Value::String(name)) if !name.is_empty() => name,
        _ => {
            return Err(Error::validation(
                "call_tool needs the tool's name: a string",
            ));
        }
    };
    let inner = match arguments.remove("arguments") {
        None | Some(Value::Null) => None,
        Some(Value::Object(inner)) => Some(inner),
        Some(_) => {
            return Err(Error::validation(
                "call_tool's arguments must be a JSON object",
            ));
        }
    };
    Ok((name, inner))
}
