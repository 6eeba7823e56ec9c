//! Criterion benches for the per-call hot paths: model-facing tool names, the prompt-mode
//! parser, the tool catalog (lookup, schema validation, the cache hit), the registry
//! lookup behind every lease, rmcp's parsing of a call's JSON-RPC messages, policy rules and
//! tool search over 1,000 tools.
//! `cargo bench --bench hot_paths`; figures in BENCHMARKS.md.

// Test and load clients dial what they are told: the outbound-client rule (clippy.toml)
// is for the service.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_pool::agent::prompt_mode::{parse_lenient, parse_reply};
use mcp_pool::config::PoolSettings;
use mcp_pool::domain::tool_name::{ToolNameTable, ToolRef, display_name};
use mcp_pool::domain::tool_search::{SentenceEncoder, ToolDocument, ToolIndex};
use mcp_pool::domain::{EmbeddedKind, McpServer, ServerName, ServerSpec, Transport, UserId};
use mcp_pool::mcp::{UpstreamHttp, UpstreamSpec, UpstreamTransport};
use mcp_pool::pool::{ConnectionKey, Pool, ServerRuntime, ToolCatalog};
use rmcp::model::Tool;
use serde_json::{Value, json};
use uuid::Uuid;

/// An assistant with 10 servers of 10 tools each.
fn tool_refs() -> Vec<ToolRef> {
    (0..10)
        .flat_map(|server| {
            let server_id = Uuid::new_v4();
            (0..10).map(move |tool| ToolRef {
                server_id,
                server_name: format!("server-{server}"),
                tool: format!("tool_{tool}"),
            })
        })
        .collect()
}

fn tool_names(c: &mut Criterion) {
    let refs = tool_refs();
    c.bench_function("tool_name/build_100", |b| {
        b.iter(|| ToolNameTable::build(black_box(refs.clone())))
    });
    let table = ToolNameTable::build(refs);
    c.bench_function("tool_name/resolve_hit", |b| {
        b.iter(|| table.resolve(black_box("mcp__server-7__tool_3")))
    });
    c.bench_function("tool_name/display_name_long", |b| {
        let server = "a-server-with-a-rather-long-descriptive-name";
        b.iter(|| display_name(black_box(server), black_box("and_a_long_tool_name_too")))
    });
}

fn prompt_mode(c: &mut Criterion) {
    let fenced = "Let me look that up.\n```json\n{\"type\":\"use_mcp_tool\",\"server_name\":\"fx\",\
                  \"tool_name\":\"echo\",\"arguments\":{\"text\":\"hello\"}}\n```";
    let plain = "The capital of France is Paris. It has been the capital since the 10th century, \
                 and it is also the largest city of the country.";
    let broken = "{'type': 'use_mcp_tool', 'server_name': 'fx', 'tool_name': 'add', \
                  'arguments': {'a': 1, 'b': 2, 'exact': True,},}";
    c.bench_function("prompt_mode/parse_reply_fenced_call", |b| {
        b.iter(|| parse_reply(black_box(fenced)))
    });
    c.bench_function("prompt_mode/parse_reply_plain_text", |b| {
        b.iter(|| parse_reply(black_box(plain)))
    });
    c.bench_function("prompt_mode/parse_lenient_repaired", |b| {
        b.iter(|| parse_lenient(black_box(broken)))
    });
}

fn catalog() -> ToolCatalog {
    let schema = |value: Value| Arc::new(value.as_object().cloned().unwrap_or_default());
    let tools = (0..50)
        .map(|n| {
            Tool::new(
                format!("tool_{n}"),
                "a tool",
                schema(json!({
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"},
                                   "note": {"type": "string", "maxLength": 100}},
                    "required": ["a", "b"]
                })),
            )
        })
        .collect();
    ToolCatalog::new(tools)
}

fn tool_catalog(c: &mut Criterion) {
    let catalog = catalog();
    let arguments = json!({"a": 1, "b": 2, "note": "x"});
    catalog.validate("tool_49", &arguments).expect("valid");
    c.bench_function("catalog/get_last_of_50", |b| {
        b.iter(|| catalog.get(black_box("tool_49")))
    });
    c.bench_function("catalog/validate_compiled", |b| {
        b.iter(|| catalog.validate(black_box("tool_49"), black_box(&arguments)))
    });
}

fn embedded_runtime(user: &UserId) -> Arc<ServerRuntime> {
    let now = chrono::Utc::now();
    let policy = Arc::new(mcp_pool::security::UrlPolicy::from_settings(
        &mcp_pool::Settings::defaults().security,
    ));
    Arc::new(ServerRuntime {
        server: McpServer {
            id: Uuid::new_v4(),
            user_id: user.clone(),
            team: None,
            spec: ServerSpec {
                name: ServerName::parse("calc").expect("name"),
                transport: Transport::Embedded(EmbeddedKind::Calculator),
                is_active: true,
                timeout_secs: None,
                disabled_tools: Vec::new(),
                auto_approve_tools: Vec::new(),
                sampling: Default::default(),
                roots: Vec::new(),
                session_scope: Default::default(),
                catalog: None,
            },
            created_at: now,
            updated_at: now,
        },
        upstream: UpstreamSpec {
            label: format!("{user}/calc"),
            transport: UpstreamTransport::Embedded(EmbeddedKind::Calculator),
            connect_timeout: Duration::from_secs(5),
            max_message_bytes: 16 << 20,
            url_policy: policy.clone(),
            http: std::sync::Arc::new(
                UpstreamHttp::new(Duration::from_secs(5), policy, 32, None).expect("http clients"),
            ),
            auth: None,
            roots: Vec::new(),
            owner: None,
            revision: Default::default(),
        },
        call_timeout: Duration::from_secs(5),
    })
}

/// A lease and a cached tool list on a pool holding 1,000 connected (embedded) actors:
/// what every call does before it reaches the upstream.
fn registry(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (pool, keys) = runtime.block_on(async {
        let pool = Pool::start(
            PoolSettings {
                connect_timeout_secs: 5,
                tool_cache_ttl_secs: 3600,
                idle_timeout_secs: 3600,
                default_call_timeout_secs: 5,
                max_call_timeout_secs: 60,
                max_connections_per_user: 10,
                max_stdio_processes: 10,
                stdio_memory_limit_mib: 0,
                stdio_max_tasks_per_server: 0,
                max_message_bytes: 16 << 20,
                inherited_env: Vec::new(),
                sessions_per_http_client: 32,
                sandbox: mcp_pool::Settings::defaults().pool.sandbox,
            },
            Default::default(),
        )
        .await
        .expect("pool");
        let mut keys = Vec::new();
        for n in 0..1000 {
            let user = UserId::parse(&format!("user{n}")).expect("user");
            let server = embedded_runtime(&user);
            let key = ConnectionKey::shared(user, server.server.id);
            let lease = pool
                .lease(&key, || async {
                    Ok::<_, mcp_pool::pool::PoolError>(server)
                })
                .await
                .expect("lease");
            pool.tools(&lease).await.expect("tools");
            keys.push(key);
        }
        (pool, keys)
    });
    let key = &keys[500];
    let never = || async { Err::<Arc<ServerRuntime>, _>(mcp_pool::pool::PoolError::Stopped) };
    c.bench_function("pool/lease_warm_of_1000", |b| {
        b.to_async(&runtime)
            .iter(|| async { pool.lease(black_box(key), never).await.expect("warm") })
    });
    let lease = runtime.block_on(pool.lease(key, never)).expect("warm");
    c.bench_function("pool/tools_cache_hit", |b| {
        b.to_async(&runtime)
            .iter(|| async { pool.tools(black_box(&lease)).await.expect("cached") })
    });
    drop(lease);
    runtime.block_on(pool.shutdown());
}

/// The JSON-RPC messages of a gateway call, parsed as rmcp parses them: the client's
/// `tools/call` as the gateway's server reads it, and the answer as an rmcp client reads it
/// from the SSE stream (the load tool's gateway client, and the pool toward HTTP upstreams).
fn jsonrpc(c: &mut Criterion) {
    use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
    let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fixture__echo","arguments":{"text":"hello"},"_meta":{"progressToken":7}}}"#;
    let answer = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}"#;
    c.bench_function("jsonrpc/parse_tools_call", |b| {
        b.iter(|| serde_json::from_slice::<ClientJsonRpcMessage>(black_box(call)).expect("call"))
    });
    c.bench_function("jsonrpc/parse_call_tool_result", |b| {
        b.iter(|| {
            serde_json::from_slice::<ServerJsonRpcMessage>(black_box(answer)).expect("answer")
        })
    });
}

/// Fifty policy rules (`loadtest/policies-50.json`), none applying, so every one is
/// evaluated: the budget is 5 µs per call at p99. Criterion times the mean; the loop
/// after it times calls one by one and prints p50 and p99.
fn policy(c: &mut Criterion) {
    use mcp_pool::domain::{CallVia, PolicyRule, UserAttributes};
    use mcp_pool::services::policies::{CallFacts, RuleSet};
    let file: Value = serde_json::from_str(include_str!("../loadtest/policies-50.json"))
        .expect("the rules file is JSON");
    let rules: Vec<PolicyRule> =
        serde_json::from_value(file["rules"].clone()).expect("the rules file holds rules");
    let set = RuleSet::compile(rules).expect("the rules compile");
    let user = UserId::parse("u").expect("user");
    let attributes =
        UserAttributes::new(vec!["customers".into()], Some("pro".into())).expect("attributes");
    let runtime = embedded_runtime(&user);
    let tool = Tool::new(
        "echo",
        "Echoes its text",
        Arc::new(
            json!({"type": "object", "properties": {"text": {"type": "string"}}})
                .as_object()
                .cloned()
                .expect("object"),
        ),
    );
    let arguments = json!({"text": "hello"});
    let facts = CallFacts {
        user: &user,
        attributes: &attributes,
        server: &runtime.server,
        tool: &tool,
        arguments: Some(&arguments),
        via: CallVia::Rest,
    };
    assert_eq!(set.decide_call(&facts, None).action, "allow");
    c.bench_function("policy/decide_50_rules", |b| {
        b.iter(|| set.decide_call(black_box(&facts), None))
    });
    one_at_a_time(
        "policy/decide_50_rules, one call at a time",
        100_000,
        || {
            black_box(set.decide_call(black_box(&facts), None));
        },
    );
}

/// A rule near its cost budget (`services::policies`, "Cost" in the README): a pairwise
/// `exists` over a call's 64 items, reckoned at about 33,300 steps of the 50,000 a rule
/// may take. What it takes is what a step costs, and what a call may be held by a rule.
fn policy_near_budget(c: &mut Criterion) {
    use mcp_pool::domain::{CallVia, PolicyAction, PolicyRule, RuleScope, UserAttributes};
    use mcp_pool::services::policies::{CallFacts, RuleSet};
    let rule = PolicyRule {
        name: "pairwise".into(),
        description: String::new(),
        on: RuleScope::Call,
        when: "arguments.items.exists(a, arguments.items.exists(b, a == b + 1000000))".into(),
        action: PolicyAction::Deny,
        fields: Vec::new(),
        dry_run: false,
    };
    let set = RuleSet::compile(vec![rule]).expect("the rule compiles");
    let user = UserId::parse("u").expect("user");
    let attributes = UserAttributes::default();
    let runtime = embedded_runtime(&user);
    let tool = Tool::new("echo", "Echoes", Arc::new(serde_json::Map::new()));
    let arguments = json!({"items": (0..64).collect::<Vec<u32>>()});
    let facts = CallFacts {
        user: &user,
        attributes: &attributes,
        server: &runtime.server,
        tool: &tool,
        arguments: Some(&arguments),
        via: CallVia::Rest,
    };
    assert_eq!(set.decide_call(&facts, None).action, "allow");
    c.bench_function("policy/pairwise_64_items", |b| {
        b.iter(|| set.decide_call(black_box(&facts), None))
    });
}

/// Times `runs` single runs of `f` and prints their p50, p99 and max: the tail Criterion's
/// mean does not show.
fn one_at_a_time(label: &str, runs: usize, mut f: impl FnMut()) {
    let mut took: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = std::time::Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    took.sort();
    eprintln!(
        "{label}: p50 {:?}, p99 {:?}, max {:?}",
        took[took.len() / 2],
        took[took.len() * 99 / 100],
        took[took.len() - 1]
    );
}

/// An assistant with 1,000 tools of 25 servers, worded like real ones.
fn thousand_tools() -> Vec<(String, String, String, serde_json::Map<String, Value>)> {
    let verbs = [
        "create", "list", "get", "update", "delete", "search", "move", "copy", "archive", "export",
    ];
    let things = [
        "issue",
        "pull request",
        "branch",
        "file",
        "page",
        "database row",
        "channel message",
        "calendar event",
        "invoice",
        "customer",
        "deployment",
        "pod",
        "screenshot",
        "comment",
        "label",
        "user",
        "ticket",
        "dashboard",
        "alert",
        "bucket object",
    ];
    let servers = [
        "github",
        "gitlab",
        "jira",
        "confluence",
        "notion",
        "slack",
        "linear",
        "sentry",
        "kubernetes",
        "filesystem",
        "git",
        "playwright",
        "supabase",
        "mongodb",
        "stripe",
        "hubspot",
        "zendesk",
        "datadog",
        "grafana",
        "s3",
        "gcal",
        "gdrive",
        "figma",
        "asana",
        "trello",
    ];
    let mut tools = Vec::new();
    for (s, server) in servers.iter().enumerate() {
        for n in 0..40 {
            let verb = verbs[(n + s) % verbs.len()];
            let thing = things[(n * 7 + s) % things.len()];
            let name = format!("{verb}_{}_{n}", thing.replace(' ', "_"));
            let description = format!(
                "{verb} a {thing} in {server}. Use it when the user asks to {verb} one or more \
                 {thing}s; returns the {thing} with its id, title and the time it was last changed."
            );
            let schema = json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": format!("The {thing}'s id")},
                    "project": {"type": "string", "description": "The project or workspace it belongs to"},
                    "limit": {"type": "integer", "description": "How many results at most"}
                }
            });
            tools.push((
                server.to_string(),
                name,
                description,
                schema.as_object().cloned().unwrap_or_default(),
            ));
        }
    }
    tools
}

fn tool_search(c: &mut Criterion) {
    let tools = thousand_tools();
    let documents = || {
        tools
            .iter()
            .map(|(server, name, description, schema)| ToolDocument {
                server,
                name,
                alias: None,
                title: None,
                description: Some(description),
                input_schema: schema,
            })
    };
    c.bench_function("tool_search/build_1000", |b| {
        b.iter(|| ToolIndex::build(black_box(documents())))
    });
    let index = ToolIndex::build(documents());
    assert_eq!(index.len(), 1_000);
    let query = "archive the customer invoices of the stripe workspace";
    assert!(!index.rank(query, None, 10).is_empty());
    c.bench_function("tool_search/rank_1000", |b| {
        b.iter(|| index.rank(black_box(query), None, 10))
    });
    one_at_a_time("tool_search/rank_1000, one query at a time", 20_000, || {
        black_box(index.rank(black_box(query), None, 10));
    });

    // Hybrid ranking, with the sentence encoder tests/setup.sh installs.
    let model =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/use-multilingual-v3");
    let encoder = match SentenceEncoder::load(&model) {
        Ok(encoder) => encoder,
        Err(error) => {
            eprintln!("tool_search: no hybrid figures ({error}); run tests/setup.sh");
            return;
        }
    };
    let started = std::time::Instant::now();
    let vectors: Vec<Arc<[f32]>> = documents()
        .map(|document| encoder.encode(&document.meaning_text()).into())
        .collect();
    eprintln!(
        "tool_search/encode_1000_tools: {:?} ({:?} a tool)",
        started.elapsed(),
        started.elapsed() / 1_000
    );
    let hybrid = ToolIndex::build(documents()).with_meanings(vectors);
    let meaning = encoder.encode(query);
    c.bench_function("tool_search/encode_query", |b| {
        b.iter(|| encoder.encode(black_box(query)))
    });
    c.bench_function("tool_search/rank_1000_hybrid", |b| {
        b.iter(|| hybrid.rank(black_box(query), Some(&meaning), 10))
    });
    one_at_a_time(
        "tool_search/rank_1000_hybrid, one query at a time",
        20_000,
        || {
            black_box(hybrid.rank(black_box(query), Some(&meaning), 10));
        },
    );
    one_at_a_time("tool_search/encode_query, one at a time", 2_000, || {
        black_box(encoder.encode(black_box(query)));
    });
}

criterion_group!(
    benches,
    tool_names,
    prompt_mode,
    tool_catalog,
    registry,
    jsonrpc,
    policy,
    policy_near_budget,
    tool_search
);
criterion_main!(benches);
