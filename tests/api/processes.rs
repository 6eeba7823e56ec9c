//! A stdio server is a process group and every process it starts, in the group (as npx
//! and uvx do) or out of it (a browser in a session of its own): all of them are counted
//! and end with it on every kind of stop, even a SIGKILL of the service; and an answer
//! over the size limit fails its call at once instead of hanging until the timeout.

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
}

/// A preset whose server is a shell that leaves a `sleep <tag>` behind it and then
/// becomes the fixture: the shape of an npx/uvx launcher.
fn launcher_preset(tag: u32, sleeper: Sleeper) -> Value {
    let start = match sleeper {
        Sleeper::InGroup => "sleep",
        Sleeper::OwnSession => "setsid sleep",
    };
    json!({
        "name": format!("launcher{tag}"),
        "command": "/bin/sh",
        "args": ["-c", format!("{start} {tag} & exec {} stdio", fixture_binary())],
    })
}

/// A tag no other test uses, so survivors are counted exactly.
fn unique_tag() -> u32 {
    900_000 + rand_u32() % 99_999
}

fn rand_u32() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

/// Live (not zombie) processes whose command line is `sleep <tag>`.
fn sleepers(tag: u32) -> usize {
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

async fn no_sleepers_left(tag: u32) {
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
async fn an_idle_reap_ends_the_whole_process_group() {
    an_idle_reap_ends(Sleeper::InGroup).await;
}

#[tokio::test]
async fn an_idle_reap_ends_a_process_that_left_the_group() {
    an_idle_reap_ends(Sleeper::OwnSession).await;
}

async fn an_idle_reap_ends(sleeper: Sleeper) {
    let tag = unique_tag();
    let app = spawn_pool_app_with(|s| s.pool.idle_timeout_secs = 1).await;
    app.create_preset_ok(launcher_preset(tag, sleeper)).await;
    running_launcher(&app, "u", tag).await;
    no_sleepers_left(tag).await;
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
async fn stdio_servers_do_not_survive_a_sigkill_of_the_service() {
    a_sigkill_of_the_service_ends(Sleeper::InGroup).await;
}

#[tokio::test]
async fn a_process_that_left_the_group_does_not_survive_a_sigkill_of_the_service() {
    a_sigkill_of_the_service_ends(Sleeper::OwnSession).await;
}

async fn a_sigkill_of_the_service_ends(sleeper: Sleeper) {
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
