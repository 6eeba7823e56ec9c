//! How well tool search finds the right tool (issue 41), on the labelled set in
//! `tests/tool-search`: real MCP servers installed from npm and PyPI (`servers.json`) and
//! requests labelled with the tool that answers them (`queries.json`). Everything goes
//! through the service, as a backend would use it: each server is an admin preset, all
//! are bound to one assistant, their tools are listed through the pool (and written to
//! `tools.json`, the set's published tool lists), and each request is ranked by
//! `GET /api/assistants/{id}/tools?query=…&limit=10`. Reports recall@1/5/10 overall, for
//! the requests where another server's tool would also fit and for the Chinese ones, and
//! the tokens of the model's tool list with every tool and in search mode.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::harness::Service;
use mcp_pool::domain::tool_name::display_name;
use mcp_pool::domain::tool_search::search_mode_tools;

const USER: &str = "eval";
const ASSISTANT: &str = "eval";
/// How many tools a search lists (recall@10 is the widest figure).
const DEPTH: usize = 10;

#[derive(Default, Clone, Copy)]
struct Recall {
    queries: usize,
    at1: usize,
    at5: usize,
    at10: usize,
}

impl Recall {
    fn count(&mut self, rank: Option<usize>) {
        self.queries += 1;
        if let Some(rank) = rank {
            self.at1 += usize::from(rank < 1);
            self.at5 += usize::from(rank < 5);
            self.at10 += usize::from(rank < 10);
        }
    }

    fn percent(part: usize, whole: usize) -> f64 {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    }

    fn to_json(self) -> Value {
        json!({
            "queries": self.queries,
            "recallAt1": Self::percent(self.at1, self.queries),
            "recallAt5": Self::percent(self.at5, self.queries),
            "recallAt10": Self::percent(self.at10, self.queries),
        })
    }
}

pub async fn run(set: PathBuf, model_dir: Option<String>, json_out: bool) -> Result<()> {
    let set = set
        .canonicalize()
        .with_context(|| format!("the labelled set {}", set.display()))?;
    let servers = read_list(&set.join("servers.json"))?;
    let queries = read_list(&set.join("queries.json"))?;
    let service = Service::start_with(|settings| {
        // Some servers start slowly (Node packages loading hundreds of modules).
        settings.pool.connect_timeout_secs = settings.pool.connect_timeout_secs.max(60);
        if let Some(dir) = &model_dir {
            settings.tool_search.model_dir = dir.clone();
        }
    })
    .await?;

    let mut ids = Vec::new();
    for server in &servers {
        let name = server["name"].as_str().context("a server without a name")?;
        let command = server["command"]
            .as_str()
            .context("a server without a command")?;
        let command = if command.contains('/') {
            set.join(command).display().to_string()
        } else {
            command.to_owned()
        };
        // Paths into the set (`node_modules/…`, a folder a server may read) made absolute:
        // the service does not run in the set's folder.
        let args: Vec<String> = server["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|arg| match set.join(arg) {
                path if !arg.starts_with('-') && !arg.starts_with('/') && path.exists() => {
                    path.display().to_string()
                }
                _ => arg.to_owned(),
            })
            .collect();
        let preset = json!({
            "name": name,
            "command": command,
            "args": args,
            "env": server.get("env").cloned().unwrap_or_else(|| json!({})),
        });
        service
            .send(reqwest::Method::POST, "/admin/presets", USER, Some(preset))
            .await
            .with_context(|| format!("the preset of {name}"))?;
        ids.push(
            service
                .create_server(USER, json!({"name": name, "preset": name}))
                .await?,
        );
    }
    let bound: Vec<&str> = ids.iter().map(String::as_str).collect();
    service.bind(USER, ASSISTANT, &bound).await?;

    // The tools, listed through the pool, server by server: the set's tools.json.
    let mut listed = Vec::new();
    let mut total = 0;
    for (server, id) in servers.iter().zip(&ids) {
        let tools = service
            .get(&format!("/api/mcp-servers/{id}/tools"), USER)
            .await
            .with_context(|| format!("listing the tools of {}", server["name"]))?;
        let tools = tools["tools"].as_array().cloned().unwrap_or_default();
        total += tools.len();
        listed.push(json!({
            "name": server["name"],
            "package": server["package"],
            "tools": tools,
        }));
    }
    std::fs::write(
        set.join("tools.json"),
        serde_json::to_string_pretty(&json!({"servers": listed}))? + "\n",
    )?;

    // What a model is sent with every tool, and in search mode.
    let all = service
        .get(
            &format!("/api/assistants/{ASSISTANT}/tools?format=openai"),
            USER,
        )
        .await?;
    if let Some(unavailable) = all["unavailable"].as_array()
        && !unavailable.is_empty()
    {
        bail!("servers did not list their tools: {unavailable:?}");
    }
    let offered = all["tools"].as_array().map_or(0, Vec::len);
    let search_mode: Vec<Value> = search_mode_tools()
        .into_iter()
        .map(|meta| {
            json!({"type": "function", "function": {
                "name": meta.name, "description": meta.description, "parameters": meta.input_schema,
            }})
        })
        .collect();
    let tokenizer = tiktoken_rs::o200k_base()?;
    let tokens = |value: &Value| tokenizer.encode_ordinary(&value.to_string()).len();
    let all_tokens = tokens(&all["tools"]);
    let search_tokens = tokens(&Value::Array(search_mode));

    // Each request, ranked through the service.
    let (mut overall, mut confusable, mut chinese, mut english) = Default::default();
    let mut misses = Vec::new();
    let mut latencies = Vec::new();
    let mut answer_tokens = Vec::new();
    for query in &queries {
        let text = query["query"].as_str().context("a query without text")?;
        let (server, tool) = (
            query["server"]
                .as_str()
                .context("a query without a server")?,
            query["tool"].as_str().context("a query without a tool")?,
        );
        let expected = display_name(server, tool);
        let started = Instant::now();
        let ranked = service
            .get(
                &format!(
                    "/api/assistants/{ASSISTANT}/tools?format=openai&limit={DEPTH}&query={}",
                    encode(text)
                ),
                USER,
            )
            .await?;
        latencies.push(started.elapsed());
        let names: Vec<&str> = ranked["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect();
        // What `search_tools` would answer (its default 5).
        answer_tokens.push(tokens(&Value::Array(
            ranked["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .take(5)
                .cloned()
                .collect(),
        )));
        let rank = names.iter().position(|n| *n == expected);
        Recall::count(&mut overall, rank);
        if query["confusable"] == true {
            Recall::count(&mut confusable, rank);
        }
        if query["lang"] == "zh" {
            Recall::count(&mut chinese, rank);
        } else {
            Recall::count(&mut english, rank);
        }
        if rank.is_none_or(|r| r >= 5) {
            misses.push(json!({
                "id": query["id"], "query": text, "expected": expected,
                "got": names.iter().take(3).collect::<Vec<_>>(),
            }));
        }
    }
    // The first search builds the index (and, with a model, encodes every tool).
    let first_search = latencies.first().copied().unwrap_or_default();
    let mut latencies = latencies.split_off(1.min(latencies.len()));
    latencies.sort();
    answer_tokens.sort();
    let p50 = |v: &[Duration]| v.get(v.len() / 2).copied().unwrap_or_default();
    let report = json!({
        "servers": servers.len(),
        "tools": total,
        "offeredToTheModel": offered,
        "overall": overall.to_json(),
        "confusable": confusable.to_json(),
        "chinese": chinese.to_json(),
        "english": english.to_json(),
        "tokens": {
            "allTools": all_tokens,
            "searchMode": search_tokens,
            "searchAnswerMedian": answer_tokens.get(answer_tokens.len() / 2).copied().unwrap_or(0),
        },
        "rankedBy": if model_dir.is_some() { "BM25 and meaning" } else { "BM25" },
        "firstSearchMs": first_search.as_secs_f64() * 1e3,
        "restSearchMedianMs": p50(&latencies).as_secs_f64() * 1e3,
        "restSearchP99Ms": latencies.get(latencies.len() * 99 / 100).copied().unwrap_or_default().as_secs_f64() * 1e3,
        "misses": misses,
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} servers, {} tools ({} offered to a model)",
            servers.len(),
            total,
            offered
        );
        println!(
            "{:<12} {:>8} {:>8} {:>8} {:>8}",
            "requests", "n", "@1", "@5", "@10"
        );
        for (label, recall) in [
            ("all", overall),
            ("confusable", confusable),
            ("chinese", chinese),
            ("english", english),
        ] {
            let r = recall.to_json();
            println!(
                "{:<12} {:>8} {:>7.1}% {:>7.1}% {:>7.1}%",
                label,
                recall.queries,
                r["recallAt1"].as_f64().unwrap_or(0.0),
                r["recallAt5"].as_f64().unwrap_or(0.0),
                r["recallAt10"].as_f64().unwrap_or(0.0)
            );
        }
        println!(
            "model's tool list: {all_tokens} tokens with every tool, {search_tokens} in search mode \
             (+ a median {} per search answer of 5 tools)",
            report["tokens"]["searchAnswerMedian"]
        );
        println!(
            "ranked by {}; REST search median {:.2} ms, p99 {:.2} ms; the first (building the index) {:.0} ms",
            report["rankedBy"].as_str().unwrap_or(""),
            report["restSearchMedianMs"].as_f64().unwrap_or(0.0),
            report["restSearchP99Ms"].as_f64().unwrap_or(0.0),
            report["firstSearchMs"].as_f64().unwrap_or(0.0)
        );
        println!("requests not in the top 5: {}", misses.len());
    }
    std::sync::Arc::new(service).stop().await
}

/// A JSON file holding a list.
fn read_list(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    match serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))? {
        Value::Array(list) => Ok(list),
        _ => bail!("{} does not hold a list", path.display()),
    }
}

fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
