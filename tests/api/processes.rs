//! A stdio server is a process group and every process it starts, in the group (as npx
//! and uvx do) or out of it (a browser in a session of its own, or a double fork that
//! leaves no parent behind): all of them are counted and end with it on every kind of
//! stop, even a SIGKILL of the service; where cgroups can be made, a server over its
//! memory or task limit is stopped and says why; and an answer over the size limit fails
//! its call at once instead of hanging until the timeout.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app_with};
use crate::logging::start_binary;
use crate::upstreams::{eventually, fixture_binary};

/// How a launcher's extra process is started.
#[derive(Clone, Copy)]
enum Sleeper {
    /// In the server's process group, as npx and uvx leave theirs.
    InGroup,
    /// In a session (and group) of its own, as Playwright and Chrome DevTools start
    /// Chromium: out of reach of the group's signals.
    OwnSession,
    /// In a session of its own, by a parent that exits at once (a double fork, as
    /// daemons start): out of reach of the group and of parentage. Only a cgroup holds it.
    Orphaned,
}

/// A preset whose server is a shell that leaves a `sleep <tag>` behind it and then
/// becomes the fixture: the shape of an npx/uvx launcher.
fn launcher_preset(tag: u32, sleeper: Sleeper) -> Value {
    let start = match sleeper {
        Sleeper::InGroup => format!("sleep {tag} &"),
        Sleeper::OwnSession => format!("setsid sleep {tag} &"),
        Sleeper::Orphaned => format!("(setsid sleep {tag} &);"),
    };
    json!({
        "name": format!("launcher{tag}"),
        "command": "/bin/sh",
        "args": ["-c", format!("{start} exec {} stdio", fixture_binary())],
    })
}

/// Whether a process here may make cgroups in `controller`'s hierarchy (v1) or in the
/// unified one with that controller available (v2), as the service does for each stdio
/// server; `None` asks for any writable hierarchy. Tests of what only a cgroup can do
/// are skipped, saying so, where none can be made.
fn cgroups_here(controller: Option<&str>) -> bool {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let probe = |dir: String| {
        let dir = std::path::PathBuf::from(dir).join(format!("probe-{}", rand_u32()));
        let made = std::fs::create_dir(&dir).is_ok();
        let _ = std::fs::remove_dir(&dir);
        made
    };
    own.lines().any(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            return false;
        };
        if controllers.is_empty() {
            ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
                .iter()
                .any(|mount| {
                    let dir = format!("{mount}{path}");
                    // v2 enables a controller for a cgroup's children only while it
                    // holds no process (the service moves itself into a leaf when it
                    // is alone, which a test's service never is): found as the service
                    // would find it.
                    let enabled = controller.is_none_or(|wanted| {
                        let on = format!("+{wanted}");
                        std::fs::write(format!("{dir}/cgroup.subtree_control"), on).is_ok()
                    });
                    enabled && probe(dir)
                })
        } else {
            controllers
                .split(',')
                .find(|c| {
                    controller.is_none_or(|wanted| *c == wanted) && ["memory", "pids"].contains(c)
                })
                .is_some_and(|c| probe(format!("/sys/fs/cgroup/{c}{path}")))
        }
    })
}

/// False, saying so, where the test needs cgroups and none can be made here.
fn skipped_without_cgroups(sleeper: Sleeper) -> bool {
    let skip = matches!(sleeper, Sleeper::Orphaned) && !cgroups_here(None);
    if skip {
        eprintln!("skipped: no cgroup can be made here, and only a cgroup holds a double fork");
    }
    skip
}

/// A tag no other test uses, so survivors are counted exactly.
pub(crate) fn unique_tag() -> u32 {
    900_000 + rand_u32() % 99_999
}

fn rand_u32() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

/// Live (not zombie) processes whose command line is `sleep <tag>`.
pub fn sleepers(tag: u32) -> usize {
    let wanted = format!("sleep\0{tag}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            (cmdline == wanted.as_bytes() && !stat.contains(") Z")).then_some(())
        })
        .count()
}

pub(crate) async fn no_sleepers_left(tag: u32) {
    eventually(&format!("no `sleep {tag}` is left"), || async {
        sleepers(tag) == 0
    })
    .await;
}

/// A server of `user` on the launcher preset, called once so its group is running.
async fn running_launcher(app: &TestApp, user: &str, tag: u32) -> String {
    let id = app
        .create_server_ok(
            user,
            json!({"name": "wrapped", "preset": format!("launcher{tag}")}),
        )
        .await;
    let echo = app.call(user, &id, "echo", json!({"text": "hi"})).await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    // Started in the background before the fixture: it may still be on its way to
    // `sleep` (through `setsid`) when the first call is answered.
    eventually("the launcher's sleeper runs", || async {
        sleepers(tag) == 1
    })
    .await;
    id
}

#[tokio::test]
async fn every_stop_ends_the_whole_process_group() {
    every_stop_ends(Sleeper::InGroup).await;
}

#[tokio::test]
async fn every_stop_ends_a_process_that_left_the_group() {
    every_stop_ends(Sleeper::OwnSession).await;
}

async fn every_stop_ends(sleeper: Sleeper) {
    if skipped_without_cgroups(sleeper) {
        return;
    }
    let tags = [unique_tag(), unique_tag(), unique_tag()];
    let app = spawn_pool_app_with(|_| {}).await;
    for (user, tag) in ["stopped", "deleted", "at-shutdown"].iter().zip(tags) {
        app.create_preset_ok(launcher_preset(tag, sleeper)).await;
        running_launcher(&app, user, tag).await;
    }
    let ids: Vec<String> = futures::future::join_all(["stopped", "deleted"].map(|user| async {
        app.user(user, Method::GET, "/api/mcp-servers", None)
            .await
            .body["servers"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }))
    .await;

    // Counted with its server, and its memory too.
    let ours = app.connections().await;
    let stopped = ours
        .iter()
        .find(|c| c["serverId"] == ids[0].as_str())
        .expect("the connection is listed");
    assert_eq!(stopped["processes"], 2, "{stopped}");
    assert!(
        stopped["memoryBytes"].as_u64().unwrap_or(0) > 0,
        "{stopped}"
    );

    let stop = app
        .admin(
            Method::DELETE,
            &format!("/admin/connections/stopped/{}", ids[0]),
            None,
        )
        .await;
    assert!(stop.status.is_success(), "{}", stop.text);
    no_sleepers_left(tags[0]).await;

    let delete = app
        .user(
            "deleted",
            Method::DELETE,
            &format!("/api/mcp-servers/{}", ids[1]),
            None,
        )
        .await;
    assert_eq!(delete.status, StatusCode::NO_CONTENT, "{}", delete.text);
    no_sleepers_left(tags[1]).await;

    assert_eq!(sleepers(tags[2]), 1);
    app.stop().await;
    no_sleepers_left(tags[2]).await;
}

#[tokio::test]
async fn every_stop_ends_a_double_forked_process() {
    every_stop_ends(Sleeper::Orphaned).await;
}

#[tokio::test]
async fn an_idle_reap_ends_the_whole_process_group() {
    an_idle_reap_ends(Sleeper::InGroup).await;
}

#[tokio::test]
async fn an_idle_reap_ends_a_process_that_left_the_group() {
    an_idle_reap_ends(Sleeper::OwnSession).await;
}

async fn an_idle_reap_ends(sleeper: Sleeper) {
    if skipped_without_cgroups(sleeper) {
        return;
    }
    let tag = unique_tag();
    let app = spawn_pool_app_with(|s| s.pool.idle_timeout_secs = 1).await;
    app.create_preset_ok(launcher_preset(tag, sleeper)).await;
    running_launcher(&app, "u", tag).await;
    no_sleepers_left(tag).await;
}

#[tokio::test]
async fn an_idle_reap_ends_a_double_forked_process() {
    an_idle_reap_ends(Sleeper::Orphaned).await;
}

#[tokio::test]
async fn a_launchers_children_count_against_the_process_limit() {
    a_launchers_children_count(Sleeper::InGroup).await;
}

#[tokio::test]
async fn a_process_that_left_the_group_counts_against_the_process_limit() {
    a_launchers_children_count(Sleeper::OwnSession).await;
}

async fn a_launchers_children_count(sleeper: Sleeper) {
    if skipped_without_cgroups(sleeper) {
        return;
    }
    let tag = unique_tag();
    // Two processes per launcher: the first fills a limit of two.
    let app = spawn_pool_app_with(|s| s.pool.max_stdio_processes = 2).await;
    app.create_preset_ok(launcher_preset(tag, sleeper)).await;
    running_launcher(&app, "first", tag).await;
    let id = app
        .create_server_ok(
            "second",
            json!({"name": "wrapped", "preset": format!("launcher{tag}")}),
        )
        .await;
    let refused = app.call("second", &id, "echo", json!({"text": "hi"})).await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.text
    );
    assert_eq!(refused.code(), "PROCESS_LIMIT_REACHED");
}

#[tokio::test]
async fn a_double_forked_process_counts_against_the_process_limit() {
    a_launchers_children_count(Sleeper::Orphaned).await;
}

#[tokio::test]
async fn stdio_servers_do_not_survive_a_sigkill_of_the_service() {
    a_sigkill_of_the_service_ends(Sleeper::InGroup).await;
}

#[tokio::test]
async fn a_process_that_left_the_group_does_not_survive_a_sigkill_of_the_service() {
    a_sigkill_of_the_service_ends(Sleeper::OwnSession).await;
}

async fn a_sigkill_of_the_service_ends(sleeper: Sleeper) {
    if skipped_without_cgroups(sleeper) {
        return;
    }
    let tag = unique_tag();
    let binary = start_binary(&[]).await;
    let client = reqwest::Client::new();
    let admin_key = crate::logging::ADMIN_KEY;
    let preset = client
        .post(format!("{}/admin/presets", binary.base))
        .bearer_auth(admin_key)
        .json(&launcher_preset(tag, sleeper))
        .send()
        .await
        .unwrap();
    assert_eq!(preset.status(), StatusCode::CREATED);
    let created: Value = client
        .post(format!("{}/api/mcp-servers", binary.base))
        .bearer_auth(admin_key)
        .header("X-User-Id", "u")
        .json(&json!({"name": "wrapped", "preset": format!("launcher{tag}")}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().expect("a server id");
    let call = client
        .post(format!(
            "{}/api/mcp-servers/{id}/tools/echo/call",
            binary.base
        ))
        .bearer_auth(admin_key)
        .header("X-User-Id", "u")
        .json(&json!({"arguments": {"text": "hi"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(call.status(), StatusCode::OK);
    eventually("the launcher's sleeper runs", || async {
        sleepers(tag) == 1
    })
    .await;
    // Once the service has seen all of the server's processes (it looks every second).
    eventually("the service counts the server's two processes", || async {
        let listed: Value = client
            .get(format!("{}/admin/connections", binary.base))
            .bearer_auth(admin_key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        listed["connections"][0]["processes"] == 2
    })
    .await;
    let mut child = binary.child;
    child.start_kill().unwrap(); // SIGKILL: no shutdown code runs.
    child.wait().await.unwrap();
    no_sleepers_left(tag).await;
}

#[tokio::test]
async fn a_double_forked_process_does_not_survive_a_sigkill_of_the_service() {
    a_sigkill_of_the_service_ends(Sleeper::Orphaned).await;
}

#[tokio::test]
async fn a_server_over_its_memory_limit_is_stopped_and_says_why() {
    if !cgroups_here(Some("memory")) {
        eprintln!("skipped: no memory cgroup can be made here");
        return;
    }
    // The pool's default for most servers, a preset's own for its servers.
    let app = spawn_pool_app_with(|s| s.pool.stdio_memory_limit_mib = 512).await;
    let usual = app.stdio_fixture_ok("u").await;
    let mut small = crate::upstreams::fixture_preset();
    small["name"] = json!("small");
    small["memoryLimitMib"] = json!(32);
    app.create_preset_ok(small).await;
    let preset = app.admin(Method::GET, "/admin/presets/small", None).await;
    assert_eq!(preset.body["memoryLimitMib"], 32, "{}", preset.text);
    let id = app
        .create_server_ok("u", json!({"name": "small", "preset": "small"}))
        .await;
    for server in [&usual, &id] {
        let echo = app
            .call("u", server, "echo", json!({"text": "small"}))
            .await;
        assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    }
    let listed = app.connections().await;
    let limit_of = |server: &str| {
        listed
            .iter()
            .find(|c| c["serverId"] == server)
            .map(|c| c["memoryLimitBytes"].clone())
    };
    assert_eq!(limit_of(&usual), Some(json!(512 << 20)), "{listed:?}");
    assert_eq!(limit_of(&id), Some(json!(32 << 20)), "{listed:?}");

    // 60 MB of text (the tool's most is 64 MiB): the kernel kills the server before it
    // could answer; the same call on the usual server is answered.
    let bytes = json!({"bytes": 60_000_000});
    let hog = app.call("u", &id, "big", bytes.clone()).await;
    assert_eq!(hog.status, StatusCode::BAD_GATEWAY, "{}", hog.text);
    assert_eq!(hog.code(), "MCP_CONNECTION_ERROR", "{}", hog.text);
    let said = "went over its memory limit of 32 MiB";
    assert!(hog.text.contains(said), "{}", hog.text);
    assert!(hog.text.contains("killed by SIGKILL"), "{}", hog.text);
    let listed = app.connections().await;
    let small_row = listed
        .iter()
        .find(|c| c["serverId"] == id.as_str())
        .unwrap();
    assert_eq!(small_row["state"], "error", "{listed:?}");
    assert!(
        small_row["lastError"].as_str().unwrap_or("").contains(said),
        "{listed:?}"
    );
    // Over the size limit for an answer, but alive.
    let fine = app.call("u", &usual, "big", bytes).await;
    assert_eq!(fine.code(), "MCP_RESULT_TOO_LARGE", "{}", fine.text);

    // A new process serves the next call, within the limit.
    let echo = app.call("u", &id, "echo", json!({"text": "again"})).await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
}

#[tokio::test]
async fn a_presets_limits_are_checked() {
    let app = spawn_pool_app_with(|_| {}).await;
    for (field, value) in [("memoryLimitMib", 2_000_000), ("maxTasks", 5_000_000)] {
        let mut preset = crate::upstreams::fixture_preset();
        preset[field] = json!(value);
        let refused = app
            .admin(Method::POST, "/admin/presets", Some(preset))
            .await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            refused.text
        );
        assert!(refused.text.contains(field), "{}", refused.text);
    }
}

#[tokio::test]
async fn a_server_at_its_task_limit_is_refused_more_and_says_why() {
    if !cgroups_here(Some("pids")) {
        eprintln!("skipped: no pids cgroup can be made here");
        return;
    }
    let tag = unique_tag();
    let app = spawn_pool_app_with(|s| s.pool.stdio_max_tasks_per_server = 12).await;
    // A launcher that starts more sleepers than the limit lets it: the shell gives up at
    // the first fork refused, before it becomes the fixture (the sleepers do not hold
    // its output open).
    app.create_preset_ok(json!({
        "name": "forker",
        "command": "/bin/sh",
        "args": ["-c", format!("for i in $(seq 30); do sleep {tag} >/dev/null & done; exec {} stdio", fixture_binary())],
    }))
    .await;
    let id = app
        .create_server_ok("u", json!({"name": "forker", "preset": "forker"}))
        .await;
    let refused = app.call("u", &id, "echo", json!({"text": "hi"})).await;
    assert_eq!(refused.status, StatusCode::BAD_GATEWAY, "{}", refused.text);
    assert_eq!(refused.code(), "MCP_CONNECTION_ERROR", "{}", refused.text);
    assert!(
        refused
            .text
            .contains("reached its limit of 12 processes and threads"),
        "{}",
        refused.text
    );
    assert!(sleepers(tag) < 12, "{} sleepers", sleepers(tag));
    no_sleepers_left(tag).await;
}

#[tokio::test]
async fn an_oversized_stdio_answer_fails_its_call_at_once() {
    let app = spawn_pool_app_with(|s| s.pool.max_message_bytes = 1 << 20).await;
    let id = app.stdio_fixture_ok("u").await;
    // The server's own timeout is long: before, the call waited all of it.
    let update = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{id}"),
            Some(json!({"timeoutSecs": 600})),
        )
        .await;
    assert_eq!(update.status, StatusCode::OK, "{}", update.text);
    let big = tokio::time::timeout(
        Duration::from_secs(60),
        app.call("u", &id, "big", json!({"bytes": 2_000_000})),
    )
    .await
    .expect("answered long before the server's timeout");
    assert_eq!(big.status, StatusCode::BAD_GATEWAY, "{}", big.text);
    assert_eq!(big.code(), "MCP_RESULT_TOO_LARGE");
    assert!(big.text.contains("1048576"), "{}", big.text);
    // The connection is intact: the next call on it works.
    let echo = app.call("u", &id, "echo", json!({"text": "after"})).await;
    assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
    let small = app.call("u", &id, "big", json!({"bytes": 500_000})).await;
    assert_eq!(small.status, StatusCode::OK, "{}", small.text);
}
