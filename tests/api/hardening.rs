//! What an outside probe of the newest surfaces found, each closed and kept closed: a
//! catalog entry's package names reaching the runtime's command line, the open-task cap
//! under concurrent requests, a stop or a deletion during a call, a costly policy rule,
//! a process that tries to leave its server's cgroup, URL variables that move the host,
//! curated names that clash with search mode's, and a team server's task after the
//! member left.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

use crate::catalog::registry_on_loopback;
use crate::governance::{set_attributes, set_policies};
use crate::helpers::{TestApp, spawn_pool_app, spawn_pool_app_with};
use crate::processes::{no_sleepers_left, sleepers, unique_tag};
use crate::tasks::{TasksClient, call, call_async, discover, ended, fixture_counter};
use crate::upstreams::{eventually, fixture_binary};

/// Files named `name` anywhere under the service's servers' homes.
fn files_named(app: &TestApp, name: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, name: &str, found: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, name, found);
            } else if entry.file_name() == name {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(
        &app.settings.storage.data_dir.join("work"),
        name,
        &mut found,
    );
    found
}

/// An npm entry as a third party could publish it.
fn npm_entry(name: &str, package: Value) -> Value {
    let mut package = package;
    package["registryType"] = json!("npm");
    package["transport"] = json!({"type": "stdio"});
    json!({"name": name, "description": "from a registry", "version": "1.0.0",
           "packages": [package]})
}

/// An operator's npx runtime; npx runs `--call` without any package in its cache.
fn npx_runtime() -> mcp_pool::config::RuntimeSettings {
    mcp_pool::config::RuntimeSettings {
        command: "npx".into(),
        args: vec!["--offline".into(), "--yes".into()],
        package: "{identifier}@{version}".into(),
        env: [("NPM_CONFIG_UPDATE_NOTIFIER".into(), "false".into())].into(),
        read_only_paths: Vec::new(),
        writable_paths: Vec::new(),
        allowed_runtime_flags: Vec::new(),
        end_of_options: true,
    }
}

#[tokio::test]
async fn a_catalog_entrys_package_fields_never_become_the_runtimes_options() {
    let app = spawn_pool_app_with(|s| {
        s.catalog.runtimes = [("npm".to_owned(), npx_runtime())].into();
    })
    .await;
    let hostile = [
        (
            "io.example/identifier",
            json!({"identifier": "--call=touch /home/mcp/pwned #"}),
            "identifier",
        ),
        (
            "io.example/version",
            json!({"identifier": "left-pad", "version": "--call=touch /home/mcp/pwned"}),
            "version",
        ),
        (
            "io.example/runtime-flag",
            json!({"identifier": "left-pad", "version": "1.3.0", "runtimeArguments": [
                {"type": "named", "name": "--call", "value": "touch /home/mcp/pwned"}]}),
            "--call",
        ),
        (
            "io.example/runtime-positional",
            json!({"identifier": "left-pad", "version": "1.3.0", "runtimeArguments": [
                {"type": "positional", "value": "--call=touch /home/mcp/pwned"}]}),
            "runtime",
        ),
        (
            "io.example/spaces",
            json!({"identifier": "left pad", "version": "1.3.0"}),
            "identifier",
        ),
    ];
    for (name, package, said) in &hostile {
        let reply = app
            .admin(
                Method::POST,
                "/admin/catalog",
                Some(npm_entry(name, package.clone())),
            )
            .await;
        if reply.status == StatusCode::CREATED {
            // Accepted: what a user's server made from it runs.
            app.admin(
                Method::PATCH,
                &format!("/admin/catalog/{name}"),
                Some(json!({"enabled": true})),
            )
            .await;
            if let Some(id) =
                app.create_server("u", json!({"catalog": name})).await.body["id"].as_str()
            {
                app.connect("u", id).await;
            }
            assert!(
                files_named(&app, "pwned").is_empty(),
                "{name}: npx ran the entry's shell command"
            );
        }
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{name}: {}",
            reply.text
        );
        assert!(reply.text.contains(said), "{name}: {}", reply.text);
    }

    // The same entries from a registry are skipped, each saying why; a good one is kept.
    let (registry, _) = registry_on_loopback(vec![vec![
        json!({"server": npm_entry("io.example/registry-hostile",
            json!({"identifier": "--call=touch /home/mcp/pwned #", "version": "1.0.0"})),
            "_meta": {}}),
        json!({"server": npm_entry("io.example/registry-fine",
            json!({"identifier": "@scope/fine-server", "version": "1.0.0"})),
            "_meta": {}}),
    ]])
    .await;
    let report = app
        .admin(
            Method::POST,
            "/admin/catalog/registry",
            Some(json!({"registry": registry})),
        )
        .await;
    assert_eq!(report.status, StatusCode::CREATED, "{}", report.text);
    assert_eq!(
        report.body["skipped"][0]["name"], "io.example/registry-hostile",
        "{}",
        report.text
    );
    assert!(
        report.body["skipped"][0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("identifier"),
        "{}",
        report.text
    );
    assert_eq!(
        report.body["imported"][0]["name"], "io.example/registry-fine",
        "{}",
        report.text
    );
}

#[tokio::test]
async fn the_open_task_cap_holds_under_concurrent_requests_on_both_doors() {
    const CAP: u64 = 8;
    let app = spawn_pool_app_with(|s| s.tasks.max_open_per_user = CAP).await;
    let server = app.fixture_for_a1(&["echo", "slow"]).await;

    let started = futures::future::join_all(
        (0..24).map(|_| call_async(&app, "u", &server, "slow", json!({"ms": 30000}))),
    )
    .await;
    let accepted = started
        .iter()
        .filter(|r| r.status == StatusCode::ACCEPTED)
        .count();
    let refused = started
        .iter()
        .filter(|r| r.status == StatusCode::TOO_MANY_REQUESTS && r.code() == "TOO_MANY_TASKS")
        .count();
    assert_eq!((accepted, refused), (CAP as usize, 24 - CAP as usize));
    let listed = app.user("u", Method::GET, "/api/tasks", None).await;
    let open = |listed: &Value| {
        listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["status"] == "working")
            .count()
    };
    assert_eq!(open(&listed.body), CAP as usize, "{}", listed.text);

    // The gateway's tasks count against the same cap: with it full, none is made; once
    // the REST tasks are cancelled, concurrent gateway calls make exactly CAP.
    for task in listed.body["tasks"].as_array().unwrap() {
        let id = task["taskId"].as_str().unwrap();
        app.user("u", Method::DELETE, &format!("/api/tasks/{id}"), None)
            .await;
    }
    let token = app.gateway_token("u", "a1").await;
    let client = discover(&app, "a1", &token, TasksClient).await;
    let calls = futures::future::join_all(
        (0..24).map(|_| client.call_tool_once(call("fx__slow", json!({"ms": 30000})))),
    )
    .await;
    let tasks = calls
        .iter()
        .filter(|c| matches!(c, Ok(CallToolResponse::Task(_))))
        .count();
    let refusals = calls
        .iter()
        .filter(|c| matches!(c, Err(e) if e.to_string().contains("too many open tasks")))
        .count();
    assert_eq!((tasks, refusals), (CAP as usize, 24 - CAP as usize));
    let listed = app.user("u", Method::GET, "/api/tasks", None).await;
    assert_eq!(open(&listed.body), CAP as usize, "{}", listed.text);
}

/// `user`'s stdio fixture with a `slow` call of `ms` running on it as a task, and the
/// host pid of its process.
async fn slow_task_running(app: &TestApp, ms: u64) -> (String, String, u32) {
    let server = app.stdio_fixture_ok("u").await;
    let pid = app.fixture_pid("u", &server).await;
    let started = call_async(app, "u", &server, "slow", json!({"ms": ms})).await;
    assert_eq!(started.status, StatusCode::ACCEPTED, "{}", started.text);
    eventually("the call reached the server", || async {
        fixture_counter(app, "u", &server, "running").await == "1"
    })
    .await;
    let task = started.body["taskId"].as_str().unwrap().to_owned();
    (server, task, pid)
}

/// `DELETE /api/mcp-servers/{server}` as `u`, asserting it is done.
async fn delete_server(app: &TestApp, server: &str) {
    let deleted = app
        .user(
            "u",
            Method::DELETE,
            &format!("/api/mcp-servers/{server}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z"))
}

#[tokio::test]
async fn deleting_a_server_during_a_task_ends_its_process_and_fails_the_task() {
    let app = spawn_pool_app().await;
    let (server, task, pid) = slow_task_running(&app, 60_000).await;
    delete_server(&app, &server).await;
    assert!(!alive(pid), "the server's process outlived its deletion");
    let task = ended(&app, "u", &task).await;
    assert_eq!(task["status"], "failed", "{task}");
    assert!(
        task["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("stopped"),
        "{task}"
    );
}

#[tokio::test]
async fn an_admin_stop_during_a_call_kills_the_process_before_it_answers() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let pid = app.fixture_pid("u", &server).await;
    let call = {
        let (address, key, server) = (app.address.clone(), app.service_key.clone(), server.clone());
        tokio::spawn(async move {
            crate::helpers::as_user(
                &key,
                Method::POST,
                format!("{address}/api/mcp-servers/{server}/tools/slow/call"),
                Some(json!({"arguments": {"ms": 8000}})),
            )
            .await
        })
    };
    eventually("the call reached the server", || async {
        fixture_counter(&app, "u", &server, "running").await == "1"
    })
    .await;
    let stopped = app
        .admin(
            Method::DELETE,
            &format!("/admin/connections/u/{server}"),
            None,
        )
        .await;
    assert_eq!(stopped.status, StatusCode::NO_CONTENT, "{}", stopped.text);
    assert!(!alive(pid), "the process outlived the admin's stop");
    let answered = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call answers once its process is gone")
        .unwrap();
    assert_eq!(
        answered.status,
        StatusCode::BAD_GATEWAY,
        "{}",
        answered.text
    );
    assert!(answered.text.contains("stopped"), "{}", answered.text);
}

#[tokio::test]
async fn a_costly_policy_rule_is_refused_when_saved_and_bounded_when_evaluated() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    // Five nested comprehensions over 30 items: 24 million steps a call.
    let items: Vec<u32> = (0..30).collect();
    let items = serde_json::to_string(&items).unwrap();
    let nested = format!(
        "{items}.all(a, {items}.all(b, {items}.all(c, {items}.all(d, {items}.all(e, a + b + c + d + e >= 0)))))"
    );
    let refused = app
        .admin(
            Method::PUT,
            "/admin/policies",
            Some(json!({"rules": [{"name": "nested", "when": nested, "action": "deny"}]})),
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert_eq!(refused.code(), "VALIDATION_ERROR");
    assert!(refused.text.contains("nested"), "{}", refused.text);
    assert!(refused.text.contains("cost"), "{}", refused.text);
    // The rule was not saved: calls run.
    let echo = app.call("u", &server, "echo", json!({"text": "hi"})).await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);

    // A pairwise rule is fine on the lists it was written for; a call whose arguments
    // would make it cost too much is refused by it, naming why, instead of evaluated.
    set_policies(
        &app,
        json!({"rules": [{"name": "distinct", "description": "no repeated item",
            "when": "has(arguments.items) && arguments.items.exists(a, arguments.items.exists(b, a == b + 1000000))",
            "action": "deny"}]}),
    )
    .await;
    let small: Vec<u32> = (0..50).collect();
    let fine = app
        .call("u", &server, "echo", json!({"text": "hi", "items": small}))
        .await;
    assert_eq!(fine.status, StatusCode::OK, "{}", fine.text);
    let large: Vec<u32> = (0..20_000).collect();
    let bounded = app
        .call("u", &server, "echo", json!({"text": "hi", "items": large}))
        .await;
    assert_eq!(bounded.status, StatusCode::FORBIDDEN, "{}", bounded.text);
    assert_eq!(bounded.code(), "POLICY_DENIED", "{}", bounded.text);
    assert!(bounded.text.contains("distinct"), "{}", bounded.text);
    assert!(bounded.text.contains("20000 items"), "{}", bounded.text);
    let health = app.request(Method::GET, "/healthz").send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_server_that_moves_itself_out_of_its_cgroup_and_double_forks_ends_with_it() {
    let tag = unique_tag();
    let app = spawn_pool_app().await;
    // Its helper writes its pid into every cgroup.procs it can see (the host's root
    // cgroups, were it the host's root), leaves its session and its parent, and sleeps.
    let escape = format!(
        "(sh -c 'for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do echo $$ > \"$f\" 2>/dev/null; done; exec setsid sleep {tag}' &); exec {} stdio",
        fixture_binary()
    );
    app.create_preset_ok(json!({"name": "escaper", "command": "/bin/sh", "args": ["-c", escape]}))
        .await;
    let server = app
        .create_server_ok("u", json!({"name": "escaper", "preset": "escaper"}))
        .await;
    let echo = app.call("u", &server, "echo", json!({"text": "hi"})).await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    eventually("the escaper's sleeper runs", || async {
        sleepers(tag) == 1
    })
    .await;
    delete_server(&app, &server).await;
    no_sleepers_left(tag).await;
}

#[tokio::test]
async fn a_url_variable_cannot_move_a_remote_entrys_host() {
    let app = spawn_pool_app().await;
    let imported = app
        .admin(
            Method::POST,
            "/admin/catalog",
            Some(
                json!({"name": "io.example/tenanted", "description": "per tenant",
                "version": "1.0.0",
                "remotes": [{"type": "streamable-http",
                    "url": "https://{tenant}.example.com/mcp?team={team}",
                    "variables": {"tenant": {"isRequired": true}, "team": {}}}]}),
            ),
        )
        .await;
    assert_eq!(imported.status, StatusCode::CREATED, "{}", imported.text);
    let enabled = app
        .admin(
            Method::PATCH,
            "/admin/catalog/io.example/tenanted",
            Some(json!({"enabled": true})),
        )
        .await;
    assert_eq!(enabled.status, StatusCode::OK, "{}", enabled.text);
    for tenant in [
        "attacker.example.net/x?",
        "attacker.example.net#",
        "u@attacker.example.net/",
        "attacker.example.net:443/",
    ] {
        let reply = app
            .create_server(
                "u",
                json!({"catalog": "io.example/tenanted", "values": {"tenant": tenant}}),
            )
            .await;
        if reply.status == StatusCode::CREATED {
            let url = url::Url::parse(reply.body["baseUrl"].as_str().unwrap()).unwrap();
            panic!("{tenant}: the server points at {:?}", url.host_str());
        }
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{tenant}: {}",
            reply.text
        );
        assert!(reply.text.contains("tenant"), "{tenant}: {}", reply.text);
    }
    // A query value is encoded, not split into parameters of its own.
    let fine = app
        .create_server(
            "u",
            json!({"catalog": "io.example/tenanted",
                   "values": {"tenant": "acme", "team": "a&admin=1"}}),
        )
        .await;
    assert_eq!(fine.status, StatusCode::CREATED, "{}", fine.text);
    let url = url::Url::parse(fine.body["baseUrl"].as_str().unwrap()).unwrap();
    assert_eq!(url.host_str(), Some("acme.example.com"));
    // (Shown masked: a query value is a secret.)
    let keys: Vec<String> = url.query_pairs().map(|(k, _)| k.into_owned()).collect();
    assert_eq!(keys, ["team"], "{url}");
}

#[tokio::test]
async fn curated_names_cannot_take_search_modes_tools_names() {
    let app = spawn_pool_app().await;
    let server = app.fixture_for_a1(&["echo"]).await;
    let set = crate::tool_search::set_exposure(&app, "search").await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    for reserved in ["call_tool", "search_tools"] {
        let refused = crate::curation::put_overrides(
            &app,
            "u",
            json!([{"serverId": server, "tool": "echo", "name": reserved, "pinned": true}]),
        )
        .await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{reserved}: {}",
            refused.text
        );
        assert!(refused.text.contains(reserved), "{}", refused.text);
    }
}

#[tokio::test]
async fn a_team_servers_task_is_started_for_members_and_refused_at_once_to_others() {
    let app = spawn_pool_app().await;
    set_attributes(&app, "alice", &["support"], "pro").await;
    app.create_preset_ok(crate::upstreams::fixture_preset())
        .await;
    let created = app
        .admin(
            Method::POST,
            "/admin/teams/support/servers",
            Some(json!({"name": "crm", "preset": "fixture"})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let server = created.body["id"].as_str().unwrap().to_owned();

    // A member with no live connection to it starts a task.
    let started = call_async(&app, "alice", &server, "echo", json!({"text": "hi"})).await;
    assert_eq!(started.status, StatusCode::ACCEPTED, "{}", started.text);
    let task = ended(&app, "alice", started.body["taskId"].as_str().unwrap()).await;
    assert_eq!(task["status"], "completed", "{task}");

    // Once she has left the team, she is refused at once, as a direct call is.
    set_attributes(&app, "alice", &["sales"], "pro").await;
    eventually("her membership ends", || async {
        app.call("alice", &server, "echo", json!({"text": "hi"}))
            .await
            .code()
            == "MCP_SERVER_NOT_FOUND"
    })
    .await;
    let refused = call_async(&app, "alice", &server, "echo", json!({"text": "hi"})).await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND, "{}", refused.text);
    assert_eq!(refused.code(), "MCP_SERVER_NOT_FOUND");
}

/// Established TCP connections to `port` on this machine (any process's).
fn connections_to(port: u16) -> usize {
    let wanted = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    // rem_address is the third field, st the fourth (01: established).
                    fields.len() > 3
                        && format!("{} ", fields[2]).ends_with(&wanted)
                        && fields[3] == "01"
                })
                .map(|_| ())
                .collect::<Vec<_>>()
        })
        .count()
}

#[tokio::test]
async fn a_deleted_http_servers_idle_connections_are_closed() {
    let app = spawn_pool_app().await;
    let fixture = crate::upstreams::HttpUpstream::fixture(None).await;
    let port: u16 = fixture.base.rsplit(':').next().unwrap().parse().unwrap();
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "remote", "type": "streamableHttp",
                   "baseUrl": format!("{}/mcp", fixture.base)}),
        )
        .await;
    let echo = app.call("u", &server, "echo", json!({"text": "hi"})).await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    assert!(
        connections_to(port) > 0,
        "the pool is connected to the server"
    );
    delete_server(&app, &server).await;
    eventually("no connection to the deleted server is left", || async {
        connections_to(port) == 0
    })
    .await;
}
