//! The server catalog from outside: the built-in entries, real npm and PyPI packages run
//! from entries (caches filled ahead of time by tests/setup.sh), remote entries at the
//! fixture (with OAuth too), the Registry's schema refusing a document, the CLI importing a
//! directory, a Registry API on loopback, and versions moving users' live servers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use mcp_pool::config::RuntimeSettings;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app_with};
use crate::upstreams::{HttpUpstream, fixture_binary};

const FILESYSTEM: &str = "io.github.modelcontextprotocol/filesystem";
const MEMORY: &str = "io.github.modelcontextprotocol/memory";

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The runtimes an operator of this machine configures: npx and uvx reading the caches
/// tests/setup.sh filled, and `fixture` running the test fixture as a package.
fn runtimes() -> BTreeMap<String, RuntimeSettings> {
    let npm_cache = repo_path("tests/catalog/.npm-cache");
    let uv_cache = repo_path("tests/catalog/.uv-cache");
    let uvx = repo_path("tests/clients/.venv/bin/uvx");
    assert!(
        npm_cache.exists() && uv_cache.exists() && uvx.exists(),
        "the catalog's packages are not installed: run tests/setup.sh (or .ci/run)"
    );
    BTreeMap::from([
        (
            "npm".to_owned(),
            RuntimeSettings {
                command: "npx".into(),
                args: vec!["--offline".into(), "--yes".into()],
                package: "{identifier}@{version}".into(),
                env: BTreeMap::from([
                    ("NPM_CONFIG_CACHE".into(), npm_cache.display().to_string()),
                    ("NPM_CONFIG_UPDATE_NOTIFIER".into(), "false".into()),
                ]),
                // npm and uv write to their caches even to read them (index compaction,
                // a lock): shared writable, as README "Sandbox" says.
                read_only_paths: Vec::new(),
                writable_paths: vec![npm_cache.display().to_string()],
                allowed_runtime_flags: Vec::new(),
                end_of_options: true,
            },
        ),
        (
            "pypi".to_owned(),
            RuntimeSettings {
                command: uvx.display().to_string(),
                args: vec!["--offline".into()],
                package: "{identifier}=={version}".into(),
                // The interpreter the sandbox sees (the cache was filled with it).
                env: BTreeMap::from([
                    ("UV_CACHE_DIR".into(), uv_cache.display().to_string()),
                    ("UV_PYTHON".into(), "/usr/bin/python3".into()),
                ]),
                read_only_paths: Vec::new(),
                writable_paths: vec![uv_cache.display().to_string()],
                allowed_runtime_flags: Vec::new(),
                end_of_options: true,
            },
        ),
        (
            "fixture".to_owned(),
            RuntimeSettings {
                command: fixture_binary().to_owned(),
                args: Vec::new(),
                package: "{identifier}".into(),
                env: BTreeMap::new(),
                read_only_paths: Vec::new(),
                writable_paths: Vec::new(),
                allowed_runtime_flags: Vec::new(),
                // The fixture takes no `--`.
                end_of_options: false,
            },
        ),
    ])
}

async fn spawn() -> TestApp {
    spawn_pool_app_with(|s| s.catalog.runtimes = runtimes()).await
}

/// `/admin/catalog/{name}` (the name holds its one `/`).
fn admin_path(name: &str) -> String {
    format!("/admin/catalog/{name}")
}

async fn enable(app: &TestApp, name: &str, extra: Value) -> Value {
    let mut body = json!({"enabled": true});
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        body[key] = value;
    }
    let reply = app
        .admin(Method::PATCH, &admin_path(name), Some(body))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body
}

async fn import(app: &TestApp, body: Value) -> Value {
    let reply = app.admin(Method::POST, "/admin/catalog", Some(body)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.body
}

/// The text of a tool call's first content block, asserting it succeeded.
async fn call_text(
    app: &TestApp,
    user: &str,
    server: &str,
    tool: &str,
    arguments: Value,
) -> String {
    let reply = app.call(user, server, tool, arguments).await;
    assert_eq!(reply.status, StatusCode::OK, "{tool}: {}", reply.text);
    assert_ne!(reply.body["isError"], true, "{tool}: {}", reply.text);
    reply.body["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{tool}: {}", reply.text))
        .to_owned()
}

fn time_entry() -> Value {
    json!({
        "$schema": "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
        "name": "io.github.modelcontextprotocol/time",
        "description": "Current time and time zone conversion",
        "version": "2026.10.19",
        "packages": [{
            "registryType": "pypi",
            "identifier": "mcp-server-time",
            "version": "2026.10.19",
            "runtimeHint": "uvx",
            "transport": {"type": "stdio"},
            "packageArguments": [{
                "type": "named", "name": "--local-timezone",
                "description": "The time zone 'local' means", "default": "UTC"
            }]
        }]
    })
}

#[tokio::test]
async fn the_built_in_entries_are_offered_only_once_the_operator_enables_them() {
    let app = spawn().await;
    let all = app.admin(Method::GET, "/admin/catalog", None).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(all.body["total"], 9, "{}", all.text);
    let names: Vec<&str> = all.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for seeded in [
        "filesystem",
        "github",
        "puppeteer",
        "postgres",
        "sqlite",
        "brave-search",
        "fetch",
        "memory",
        "sequential-thinking",
    ] {
        assert!(
            names.contains(&format!("io.github.modelcontextprotocol/{seeded}").as_str()),
            "{seeded} missing from {names:?}"
        );
    }
    assert!(
        all.body["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["enabled"] == false),
        "nothing runs that the operator did not choose"
    );
    let none = app.user("u", Method::GET, "/api/catalog", None).await;
    assert_eq!(none.body["total"], 0, "{}", none.text);
    let refused = app
        .create_server(
            "u",
            json!({"catalog": FILESYSTEM, "values": {"directory": "/tmp"}}),
        )
        .await;
    assert_eq!(
        refused.code(),
        "CATALOG_ENTRY_NOT_FOUND",
        "{}",
        refused.text
    );

    enable(&app, FILESYSTEM, json!({})).await;
    let offered = app
        .user("u", Method::GET, "/api/catalog?search=FILES", None)
        .await;
    assert_eq!(offered.body["total"], 1, "{}", offered.text);
    let entry = &offered.body["entries"][0];
    assert_eq!(entry["name"], FILESYSTEM);
    assert_eq!(entry["kind"], "package");
    assert_eq!(entry["fields"][0]["name"], "directory");
    assert_eq!(entry["fields"][0]["required"], true);
    let by_tag = app
        .user("u", Method::GET, "/api/catalog?tag=files", None)
        .await;
    assert_eq!(by_tag.body["total"], 1, "{}", by_tag.text);
    let other_tag = app
        .user("u", Method::GET, "/api/catalog?tag=database", None)
        .await;
    assert_eq!(other_tag.body["total"], 0, "{}", other_tag.text);
}

#[tokio::test]
async fn real_npm_and_pypi_packages_run_from_catalog_entries() {
    let app = spawn().await;
    import(&app, time_entry()).await;
    for name in [FILESYSTEM, MEMORY, "io.github.modelcontextprotocol/time"] {
        enable(&app, name, json!({})).await;
    }
    // Paths a user gives name places inside the server's sandbox: its home is /home/mcp.
    let files = app
        .create_server_ok(
            "u",
            json!({"catalog": FILESYSTEM, "values": {"directory": "/home/mcp"}}),
        )
        .await;
    call_text(
        &app,
        "u",
        &files,
        "write_file",
        json!({"path": "/home/mcp/notes.txt", "content": "from the catalog test"}),
    )
    .await;
    let read = call_text(
        &app,
        "u",
        &files,
        "read_text_file",
        json!({"path": "/home/mcp/notes.txt"}),
    )
    .await;
    assert!(read.contains("from the catalog test"), "{read}");
    let homes = app.settings.storage.data_dir.join("work");
    assert_eq!(
        files_named(&homes, "notes.txt").len(),
        1,
        "the note is in the server's home"
    );

    // Two users' servers of one entry keep two graphs, each in its own home (by the
    // entry's default MEMORY_FILE_PATH), not one inside the shared package.
    let mut graphs = Vec::new();
    for (user, fact) in [("u", "wrote the first program"), ("v", "broke the Enigma")] {
        let memory = app.create_server_ok(user, json!({"catalog": MEMORY})).await;
        call_text(
            &app,
            user,
            &memory,
            "create_entities",
            json!({"entities": [{"name": "Someone", "entityType": "person", "observations": [fact]}]}),
        )
        .await;
        graphs.push((user, memory, fact));
    }
    for (user, memory, fact) in &graphs {
        let graph_text = call_text(&app, user, memory, "read_graph", json!({})).await;
        assert!(graph_text.contains(fact), "{user}: {graph_text}");
        let other = if *user == "u" {
            "broke the Enigma"
        } else {
            "wrote the first program"
        };
        assert!(
            !graph_text.contains(other),
            "{user} reads another user's memories: {graph_text}"
        );
    }
    assert_eq!(files_named(&homes, "memory.jsonl").len(), 2);

    let time = app
        .create_server_ok(
            "u",
            json!({"catalog": "io.github.modelcontextprotocol/time"}),
        )
        .await;
    let now = call_text(
        &app,
        "u",
        &time,
        "get_current_time",
        json!({"timezone": "UTC"}),
    )
    .await;
    assert!(now.contains("UTC"), "{now}");

    // Each server shows where it came from and the command the entry resolved to.
    let shown = app
        .user("u", Method::GET, &format!("/api/mcp-servers/{time}"), None)
        .await;
    assert_eq!(shown.body["catalog"], "io.github.modelcontextprotocol/time");
    assert_eq!(shown.body["name"], "time");
    let args = shown.body["args"].to_string();
    assert!(
        args.contains("mcp-server-time==2026.10.19") && args.contains("--local-timezone=UTC"),
        "{args}"
    );

    // The operator sees who uses which entry.
    let users = app
        .admin(
            Method::GET,
            &format!("{}/servers", admin_path(MEMORY)),
            None,
        )
        .await;
    assert_eq!(users.body["total"], 2, "{}", users.text);
    let owners: Vec<&str> = users.body["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["userId"].as_str())
        .collect();
    assert!(owners.contains(&"u") && owners.contains(&"v"), "{owners:?}");
    let listed = app
        .admin(Method::GET, "/admin/catalog?search=memory", None)
        .await;
    assert_eq!(listed.body["entries"][0]["servers"], 2, "{}", listed.text);
}

#[tokio::test]
async fn values_are_checked_by_the_entry_and_secrets_are_sealed_and_masked() {
    let app = spawn().await;
    import(
        &app,
        json!({
            "name": "io.example/fx",
            "description": "the fixture as a package",
            "version": "1.0.0",
            "packages": [{
                "registryType": "fixture", "identifier": "stdio", "transport": {"type": "stdio"},
                "environmentVariables": [
                    {"name": "FIXTURE_MODE", "choices": ["a", "b"], "isRequired": true},
                    {"name": "FIXTURE_TOKEN", "isSecret": true},
                    {"name": "FIXTURE_ROOT", "value": "/srv/{tenant}",
                     "variables": {"tenant": {"isRequired": true}}}
                ],
                "packageArguments": [{"type": "positional", "valueHint": "extra"}]
            }]
        }),
    )
    .await;
    enable(
        &app,
        "io.example/fx",
        json!({"patterns": {"tenant": "[a-z]+"}}),
    )
    .await;
    let refusals = [
        (json!({}), "values.FIXTURE_MODE is required"),
        (json!({"FIXTURE_MODE": "c", "tenant": "t"}), "one of a, b"),
        (json!({"FIXTURE_MODE": "a", "tenant": "T1"}), "pattern"),
        (
            json!({"FIXTURE_MODE": "a", "tenant": "t", "LD_PRELOAD": "/x.so"}),
            "not an input",
        ),
        (
            json!({"FIXTURE_MODE": "a", "tenant": "t", "extra": "--inspect"}),
            "must not start with '-'",
        ),
    ];
    for (values, expected) in refusals {
        let reply = app
            .create_server("u", json!({"catalog": "io.example/fx", "values": values}))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.code(), "VALIDATION_ERROR");
        assert!(reply.text.contains(expected), "{expected}: {}", reply.text);
    }
    let server = app
        .create_server_ok(
            "u",
            json!({"catalog": "io.example/fx", "name": "fx",
                   "values": {"FIXTURE_MODE": "b", "FIXTURE_TOKEN": "s3cret-token", "tenant": "acme"}}),
        )
        .await;
    let shown = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}"),
            None,
        )
        .await;
    assert_eq!(
        shown.body["values"]["FIXTURE_TOKEN"], "********",
        "{}",
        shown.text
    );
    assert_eq!(shown.body["values"]["FIXTURE_MODE"], "b");
    assert!(!shown.text.contains("s3cret-token"), "{}", shown.text);
    let at_rest = app.raw_column("mcp_servers", "catalog_secrets").await;
    assert!(
        at_rest.iter().all(|v| !v.contains("s3cret-token")),
        "sealed at rest"
    );
    // The server got every value, the secret in clear and the variable filled in.
    assert_eq!(
        call_text(&app, "u", &server, "env", json!({"name": "FIXTURE_TOKEN"})).await,
        "s3cret-token"
    );
    assert_eq!(
        call_text(&app, "u", &server, "env", json!({"name": "FIXTURE_ROOT"})).await,
        "/srv/acme"
    );

    // A GET → PUT round trip keeps everything, the masked secret included.
    let mut round_trip = shown.body.clone();
    round_trip["values"]["FIXTURE_MODE"] = json!("a");
    let updated = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{server}"),
            Some(round_trip),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.text);
    assert_eq!(
        call_text(&app, "u", &server, "env", json!({"name": "FIXTURE_TOKEN"})).await,
        "s3cret-token"
    );
    assert_eq!(
        call_text(&app, "u", &server, "env", json!({"name": "FIXTURE_MODE"})).await,
        "a"
    );
    let chosen = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{server}"),
            Some(json!({"command": "/bin/sh"})),
        )
        .await;
    assert_eq!(
        chosen.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        chosen.text
    );

    // A value the operator fixes is no longer the user's to set, and wins.
    enable(
        &app,
        "io.example/fx",
        json!({"fixed": {"FIXTURE_TOKEN": "operator-token"}}),
    )
    .await;
    let entry = app
        .user("u", Method::GET, "/api/catalog/io.example/fx", None)
        .await;
    assert!(!entry.text.contains("FIXTURE_TOKEN"), "{}", entry.text);
    let admin_view = app
        .admin(Method::GET, &admin_path("io.example/fx"), None)
        .await;
    assert_eq!(
        admin_view.body["fixed"]["FIXTURE_TOKEN"], "********",
        "{}",
        admin_view.text
    );

    // Disabled by the operator: the server says so instead of running.
    let disabled = app
        .admin(
            Method::PATCH,
            &admin_path("io.example/fx"),
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(disabled.status, StatusCode::OK, "{}", disabled.text);
    let stopped = app
        .call("u", &server, "env", json!({"name": "FIXTURE_MODE"}))
        .await;
    assert_eq!(
        (stopped.status, stopped.code()),
        (StatusCode::FORBIDDEN, "CATALOG_ENTRY_DISABLED"),
        "{}",
        stopped.text
    );
    let in_use = app
        .admin(Method::DELETE, &admin_path("io.example/fx"), None)
        .await;
    assert_eq!(in_use.status, StatusCode::CONFLICT, "{}", in_use.text);
}

#[tokio::test]
async fn a_new_version_or_the_operators_change_reaches_users_servers_at_once_unless_pinned() {
    let app = spawn().await;
    let version = |v: &str| {
        json!({
            "name": "io.example/versioned",
            "description": "the fixture, by version",
            "version": v,
            "packages": [{
                "registryType": "fixture", "identifier": "stdio", "transport": {"type": "stdio"},
                "environmentVariables": [{"name": "FIXTURE_VERSION", "value": v}]
            }]
        })
    };
    import(&app, version("1.0.0")).await;
    enable(&app, "io.example/versioned", json!({})).await;
    let follows = app
        .create_server_ok(
            "u",
            json!({"catalog": "io.example/versioned", "name": "follows"}),
        )
        .await;
    let pinned = app
        .create_server_ok(
            "u",
            json!({"catalog": "io.example/versioned", "name": "pinned", "catalogVersion": "1.0.0"}),
        )
        .await;
    let running = |server: String| {
        let app = &app;
        async move { call_text(app, "u", &server, "env", json!({"name": "FIXTURE_VERSION"})).await }
    };
    assert_eq!(running(follows.clone()).await, "1.0.0");
    assert_eq!(running(pinned.clone()).await, "1.0.0");

    let imported = import(&app, version("1.1.0")).await;
    assert_eq!(
        imported["imported"][0]["outcome"], "newVersion",
        "{imported}"
    );
    // An older version imported later does not become the latest.
    import(&app, version("0.9.0")).await;
    // Live connections of the servers that follow the entry were stopped: no waiting for
    // an idle timeout.
    assert_eq!(running(follows.clone()).await, "1.1.0");
    assert_eq!(running(pinned.clone()).await, "1.0.0");

    // The operator pins the entry: servers that follow it go back on their next connect.
    let entry = enable(
        &app,
        "io.example/versioned",
        json!({"pinnedVersion": "1.0.0"}),
    )
    .await;
    assert_eq!(entry["latestVersion"], "1.1.0");
    assert_eq!(entry["versions"].as_array().unwrap().len(), 3, "{entry}");
    assert_eq!(running(follows).await, "1.0.0");
    let unknown = app
        .admin(
            Method::PATCH,
            &admin_path("io.example/versioned"),
            Some(json!({"pinnedVersion": "7.0.0"})),
        )
        .await;
    assert_eq!(
        unknown.code(),
        "CATALOG_ENTRY_NOT_FOUND",
        "{}",
        unknown.text
    );
}

#[tokio::test]
async fn a_remote_entry_points_at_the_fixture_and_its_oauth_is_the_users() {
    let app = spawn().await;
    let plain = HttpUpstream::fixture_with(&["--require-query", "api_key=k1"]).await;
    let protected = HttpUpstream::fixture_with(&["--oauth"]).await;
    let remote = |name: &str, url: String, variables: Value| {
        json!({
            "name": name, "description": "the fixture over HTTP", "version": "1.0.0",
            "remotes": [{"type": "streamable-http", "url": url, "variables": variables}]
        })
    };
    import(
        &app,
        json!([
            remote(
                "io.example/remote",
                format!("{}/mcp?api_key={{key}}", plain.base),
                json!({"key": {"isRequired": true, "isSecret": true}}),
            ),
            remote(
                "io.example/protected",
                format!("{}/mcp", protected.base),
                json!({})
            ),
        ]),
    )
    .await;
    enable(&app, "io.example/remote", json!({})).await;
    enable(&app, "io.example/protected", json!({})).await;
    let entry = app
        .user("u", Method::GET, "/api/catalog/io.example/remote", None)
        .await;
    assert_eq!(entry.body["kind"], "remote", "{}", entry.text);
    let server = app
        .create_server_ok(
            "u",
            json!({"catalog": "io.example/remote", "values": {"key": "k1"}}),
        )
        .await;
    assert_eq!(
        call_text(&app, "u", &server, "add", json!({"a": 2, "b": 3})).await,
        "5"
    );
    let shown = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}"),
            None,
        )
        .await;
    assert_eq!(shown.body["type"], "streamableHttp");
    assert!(
        !shown.text.contains("k1"),
        "the key is masked: {}",
        shown.text
    );

    let oauth = app
        .create_server_ok("u", json!({"catalog": "io.example/protected"}))
        .await;
    let refused = app.call("u", &oauth, "add", json!({"a": 1, "b": 1})).await;
    assert_eq!(refused.code(), "MCP_AUTH_REQUIRED", "{}", refused.text);
    crate::oauth::authorize(&app, "u", &oauth).await;
    assert_eq!(
        call_text(&app, "u", &oauth, "add", json!({"a": 1, "b": 1})).await,
        "2"
    );
    // Another user of the same entry has tokens of their own.
    let theirs = app
        .create_server_ok("v", json!({"catalog": "io.example/protected"}))
        .await;
    let not_yet = app.call("v", &theirs, "add", json!({"a": 1, "b": 1})).await;
    assert_eq!(not_yet.code(), "MCP_AUTH_REQUIRED", "{}", not_yet.text);
}

#[tokio::test]
async fn an_invalid_server_json_is_refused_with_the_schemas_reason() {
    let app = spawn().await;
    let reply = app
        .admin(
            Method::POST,
            "/admin/catalog",
            Some(json!({"name": "no-namespace", "version": "1.0.0",
                        "packages": [{"registryType": "npm", "identifier": "x"}]})),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert_eq!(reply.code(), "SERVER_JSON_INVALID");
    let message = reply.body["error"]["message"].as_str().unwrap();
    for reason in ["description", "/name", "/packages/0", "transport"] {
        assert!(message.contains(reason), "{reason}: {message}");
    }
    let ranged = app
        .admin(
            Method::POST,
            "/admin/catalog",
            Some(json!([
                {"name": "io.example/ok", "description": "d", "version": "1.0.0"},
                {"name": "io.example/ranged", "description": "d", "version": "^1.0.0"}
            ])),
        )
        .await;
    assert_eq!(ranged.code(), "SERVER_JSON_INVALID", "{}", ranged.text);
    assert!(
        ranged.text.contains("document 1") && ranged.text.contains("range"),
        "{}",
        ranged.text
    );
    let none = app
        .admin(Method::GET, "/admin/catalog?search=io.example", None)
        .await;
    assert_eq!(
        none.body["total"], 0,
        "one invalid document imports none: {}",
        none.text
    );
    // Enabling an entry that cannot run here says why.
    import(
        &app,
        json!({"name": "io.example/nuget", "description": "d", "version": "1.0.0",
               "packages": [{"registryType": "nuget", "identifier": "X", "transport": {"type": "stdio"}}]}),
    )
    .await;
    let cannot = app
        .admin(
            Method::PATCH,
            &admin_path("io.example/nuget"),
            Some(json!({"enabled": true})),
        )
        .await;
    assert_eq!(
        cannot.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        cannot.text
    );
    assert!(cannot.text.contains("offers nuget"), "{}", cannot.text);
}

#[tokio::test]
async fn the_cli_imports_a_directory_of_fifty_entries() {
    use secrecy::ExposeSecret;
    let app = spawn().await;
    let dir = tempfile::tempdir().unwrap();
    for i in 0..50 {
        let entry = json!({
            "name": format!("io.example.bulk/server-{i:02}"),
            "description": format!("bulk entry {i}"),
            "version": "1.0.0",
            "remotes": [{"type": "streamable-http", "url": format!("https://bulk-{i}.example.com/mcp")}]
        });
        std::fs::write(dir.path().join(format!("{i:02}.json")), entry.to_string()).unwrap();
    }
    std::fs::write(dir.path().join("README.txt"), "not a document").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-pool"))
        .args(["catalog", "import"])
        .arg(dir.path())
        .env("DATABASE_URL", app.settings.database.url.expose_secret())
        .env(
            "MCP_POOL__STORAGE__DATA_DIR",
            &app.settings.storage.data_dir,
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("imported 50 document(s)"), "{stderr}");
    let listed = app
        .admin(
            Method::GET,
            "/admin/catalog?search=io.example.bulk&pageSize=20&page=2",
            None,
        )
        .await;
    assert_eq!(listed.body["total"], 50, "{}", listed.text);
    assert_eq!(listed.body["entries"].as_array().unwrap().len(), 10);
    assert_eq!(
        listed.body["entries"][0]["name"],
        "io.example.bulk/server-40"
    );

    std::fs::write(
        dir.path().join("99.json"),
        json!({"name": "bad"}).to_string(),
    )
    .unwrap();
    let invalid = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-pool"))
        .args(["catalog", "import"])
        .arg(dir.path())
        .env("DATABASE_URL", app.settings.database.url.expose_secret())
        .env(
            "MCP_POOL__STORAGE__DATA_DIR",
            &app.settings.storage.data_dir,
        )
        .output()
        .unwrap();
    assert!(!invalid.status.success());
    let stderr = String::from_utf8_lossy(&invalid.stderr);
    assert!(
        stderr.contains("document 50") && stderr.contains("description"),
        "{stderr}"
    );
}

/// The registry's pages, and the queries it was asked.
type RegistryState = (Arc<Vec<Vec<Value>>>, Arc<Mutex<Vec<String>>>);

/// A Registry API on loopback (`GET /v0.1/servers`, cursor paging, `updated_since`), as
/// the official registry answers; it records the queries it was asked.
pub(crate) async fn registry_on_loopback(
    pages: Vec<Vec<Value>>,
) -> (String, Arc<Mutex<Vec<String>>>) {
    use axum::extract::{Query, State};
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let state = (Arc::new(pages), asked.clone());
    let app = axum::Router::new()
        .route(
            "/v0.1/servers",
            axum::routing::get(
                |State((pages, asked)): State<RegistryState>,
                 Query(query): Query<BTreeMap<String, String>>| async move {
                    asked
                        .lock()
                        .unwrap()
                        .push(serde_json::to_string(&query).unwrap());
                    let index: usize = query.get("cursor").map_or(0, |c| c.parse().unwrap());
                    let next = (index + 1 < pages.len()).then(|| (index + 1).to_string());
                    axum::Json(json!({
                        "servers": pages[index],
                        "metadata": {"count": pages[index].len(), "nextCursor": next}
                    }))
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, asked)
}

fn listed(name: &str, version: &str, status: &str) -> Value {
    json!({
        "server": {
            "name": name, "description": format!("{name} from the registry"), "version": version,
            "remotes": [{"type": "streamable-http", "url": "https://example.com/mcp"}]
        },
        "_meta": {"io.modelcontextprotocol.registry/official": {
            "status": status, "isLatest": true,
            "publishedAt": "2026-11-01T00:00:00Z", "updatedAt": "2026-11-20T00:00:00Z"
        }}
    })
}

#[tokio::test]
async fn a_registry_api_is_read_page_by_page() {
    let app = spawn().await;
    let (base, asked) = registry_on_loopback(vec![
        vec![
            listed("io.example/one", "1.0.0", "active"),
            listed("io.example/two", "2.0.0", "active"),
        ],
        vec![
            json!({"server": {"name": "io.example/broken", "version": "1.0.0"}, "_meta": {}}),
            listed("io.example/gone", "1.0.0", "deleted"),
        ],
        vec![listed("io.example/three", "3.0.0", "deprecated")],
    ])
    .await;
    let report = app
        .admin(
            Method::POST,
            "/admin/catalog/registry",
            Some(json!({"registry": base, "updatedSince": "2026-11-15T00:00:00Z"})),
        )
        .await;
    assert_eq!(report.status, StatusCode::CREATED, "{}", report.text);
    let report = report.body;
    assert_eq!(report["pages"], 3, "{report}");
    let imported: Vec<&str> = report["imported"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        imported,
        ["io.example/one", "io.example/two", "io.example/three"]
    );
    assert_eq!(
        report["skipped"][0]["name"], "io.example/broken",
        "{report}"
    );
    assert!(
        report["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("description")
    );
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3);
    assert!(
        asked.iter().all(|q| q.contains("2026-11-15T00:00:00")),
        "{asked:?}"
    );
    assert!(asked[1].contains("\"cursor\":\"1\""), "{asked:?}");
    let listed = app
        .admin(Method::GET, "/admin/catalog?tag=remote", None)
        .await;
    assert_eq!(listed.body["total"], 3, "{}", listed.text);

    let unreachable = app
        .admin(
            Method::POST,
            "/admin/catalog/registry",
            Some(json!({"registry": "http://127.0.0.1:9/"})),
        )
        .await;
    assert_eq!(
        (unreachable.status, unreachable.code()),
        (StatusCode::BAD_GATEWAY, "REGISTRY_UNAVAILABLE"),
        "{}",
        unreachable.text
    );
    assert!(!unreachable.text.contains("::"), "{}", unreachable.text);
}

/// The files called `name` below `dir`.
fn files_named(dir: &std::path::Path, name: &str) -> Vec<PathBuf> {
    crate::sandbox::walk(dir)
        .into_iter()
        .filter(|path| path.file_name().is_some_and(|n| n == name))
        .collect()
}
