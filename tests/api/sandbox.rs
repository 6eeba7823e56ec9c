//! Every user's stdio server runs in a sandbox of its own: the fixture's probe tools (what
//! a hostile server, or a model told to by a web page, tries on its host) find nothing
//! of the service (its data directory, its environment, its processes, its port) nor of
//! other users' servers; each server keeps its state in a private home that survives a
//! reconnect and goes with the server; its network is none, egress through the service's
//! proxy under the URL policy, or the host's by an admin's choice.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use futures::future::BoxFuture;
use mcp_pool::security::NameLookup;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app_resolving, spawn_pool_app, spawn_pool_app_with};
use crate::processes::sleepers;
use crate::upstreams::{eventually, fixture_binary, text_of};

/// The probe preset (network as given; absent: the pool's default) and `user`'s server.
async fn probe_server(app: &TestApp, user: &str, network: Option<&str>) -> String {
    let mut preset = json!({
        "name": "probe",
        "command": fixture_binary(),
        "args": ["stdio", "--probe-tools"],
        "env": {"PROBE_SECRET": "the server's own"},
    });
    if let Some(network) = network {
        preset["sandbox"] = json!({"network": network});
    }
    let reply = app
        .admin(Method::POST, "/admin/presets", Some(preset.clone()))
        .await;
    if reply.status == StatusCode::CONFLICT {
        let put = app
            .admin(Method::PUT, "/admin/presets/probe", Some(preset))
            .await;
        assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    } else {
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    app.create_server_ok(user, json!({"name": "probe", "preset": "probe"}))
        .await
}

/// A probe tool's answer: `Ok(text)` for a success, `Err(text)` for a tool error.
async fn probe(
    app: &TestApp,
    user: &str,
    server: &str,
    tool: &str,
    arguments: Value,
) -> Result<String, String> {
    let reply = app.call(user, server, tool, arguments).await;
    assert_eq!(reply.status, StatusCode::OK, "{tool}: {}", reply.text);
    let text = text_of(&reply.body).to_owned();
    if reply.body["isError"] == json!(true) {
        Err(text)
    } else {
        Ok(text)
    }
}

#[tokio::test]
async fn a_sandboxed_server_sees_nothing_of_the_service() {
    let app = spawn_pool_app().await;
    let server = probe_server(&app, "mallory", None).await;
    let data_dir = app.settings.storage.data_dir.clone();
    // Made before the server starts: the key every user's secrets are sealed with.
    assert!(data_dir.join("encryption.key").exists());

    let key = probe(
        &app,
        "mallory",
        &server,
        "read_path",
        json!({"path": data_dir.join("encryption.key")}),
    )
    .await;
    assert!(key.is_err(), "the encryption key was read: {key:?}");
    let listing = probe(
        &app,
        "mallory",
        &server,
        "read_path",
        json!({"path": data_dir}),
    )
    .await;
    assert!(
        listing.is_err(),
        "the data directory was listed: {listing:?}"
    );
    let environ = probe(
        &app,
        "mallory",
        &server,
        "read_path",
        json!({"path": format!("/proc/{}/environ", std::process::id())}),
    )
    .await;
    assert!(
        environ.is_err() || !environ.as_ref().unwrap().contains("CARGO"),
        "the service's environment was read: {environ:?}"
    );
    let written = probe(
        &app,
        "mallory",
        &server,
        "write_path",
        json!({"path": data_dir.join("planted"), "text": "x"}),
    )
    .await;
    assert!(
        written.is_err() && !data_dir.join("planted").exists(),
        "wrote into the data directory"
    );
    let etc = probe(
        &app,
        "mallory",
        &server,
        "read_path",
        json!({"path": "/etc/shadow"}),
    )
    .await;
    assert!(etc.is_err(), "/etc/shadow was read");

    // Its own processes only: the service's pid is not among them.
    let processes = probe(&app, "mallory", &server, "list_processes", json!({}))
        .await
        .unwrap();
    let pids: Vec<u32> = processes
        .lines()
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect();
    assert!(!pids.contains(&std::process::id()), "{processes}");
    assert!(pids.len() <= 4, "more than its own processes: {processes}");

    // Only its own environment: no variable of the service's (cargo sets CARGO_* here).
    let environment = probe(&app, "mallory", &server, "environment", json!({}))
        .await
        .unwrap();
    assert!(
        environment.contains("PROBE_SECRET=the server's own"),
        "{environment}"
    );
    assert!(environment.contains("HOME=/home/mcp"), "{environment}");
    assert!(!environment.contains("CARGO"), "{environment}");

    // Not the service's port on loopback (the default network has no route to it).
    let port = app.address.rsplit(':').next().unwrap();
    let dial = probe(
        &app,
        "mallory",
        &server,
        "connect",
        json!({"host": "127.0.0.1", "port": port.parse::<u16>().unwrap()}),
    )
    .await;
    assert!(dial.is_err(), "reached the service's port: {dial:?}");

    let identity = probe(&app, "mallory", &server, "identity", json!({}))
        .await
        .unwrap();
    assert!(identity.starts_with("uid=1000 gid=1000"), "{identity}");
}

#[tokio::test]
async fn each_server_keeps_its_state_in_a_private_home_that_goes_with_it() {
    let app = spawn_pool_app().await;
    let alice = probe_server(&app, "alice", None).await;
    let bob = probe_server(&app, "bob", None).await;

    let wrote = probe(
        &app,
        "alice",
        &alice,
        "write_path",
        json!({"path": "notes.txt", "text": "alice's"}),
    )
    .await;
    assert_eq!(wrote.as_deref(), Ok("written"));
    assert_eq!(
        probe(
            &app,
            "alice",
            &alice,
            "read_path",
            json!({"path": "/home/mcp/notes.txt"})
        )
        .await
        .as_deref(),
        Ok("alice's")
    );
    // Bob's home is another: nothing of alice's there, and her home's host path is not
    // in his sandbox.
    let theirs = probe(
        &app,
        "bob",
        &bob,
        "read_path",
        json!({"path": "/home/mcp/notes.txt"}),
    )
    .await;
    assert!(theirs.is_err(), "{theirs:?}");
    let work = app.settings.storage.data_dir.join("work");
    let homes: Vec<_> = walk(&work)
        .into_iter()
        .filter(|p| p.ends_with("notes.txt"))
        .collect();
    assert_eq!(homes.len(), 1, "{homes:?}");
    let by_path = probe(&app, "bob", &bob, "read_path", json!({"path": homes[0]})).await;
    assert!(by_path.is_err(), "{by_path:?}");

    // The admin list shows the home's size (alice's note: 7 bytes; bob's home: empty).
    let listed = app
        .admin(Method::GET, "/admin/servers?search=alice", None)
        .await;
    assert_eq!(listed.body["servers"][0]["homeBytes"], 7, "{}", listed.text);

    // Kept across a reconnect (the admin closes the connection).
    let closed = app
        .admin(
            Method::DELETE,
            &format!("/admin/connections/alice/{alice}"),
            None,
        )
        .await;
    assert!(closed.status.is_success(), "{}", closed.text);
    assert_eq!(
        probe(
            &app,
            "alice",
            &alice,
            "read_path",
            json!({"path": "notes.txt"})
        )
        .await
        .as_deref(),
        Ok("alice's")
    );

    // Deleted with the server.
    let deleted = app
        .user(
            "alice",
            Method::DELETE,
            &format!("/api/mcp-servers/{alice}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert!(!homes[0].exists(), "the home outlived its server");
}

/// Every file below `dir` (links not followed into).
pub fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[tokio::test]
async fn a_daemon_a_server_leaves_behind_ends_with_it() {
    let app = spawn_pool_app().await;
    let server = probe_server(&app, "u", None).await;
    let seconds = 700_000 + (uuid::Uuid::new_v4().as_u128() % 99_999) as u32;
    probe(&app, "u", &server, "daemon", json!({"seconds": seconds}))
        .await
        .unwrap();
    eventually("the daemon runs", || async { sleepers(seconds) == 1 }).await;
    let deleted = app
        .user(
            "u",
            Method::DELETE,
            &format!("/api/mcp-servers/{server}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    eventually("the daemon is gone", || async { sleepers(seconds) == 0 }).await;
}

#[tokio::test]
async fn a_server_without_network_reaches_nothing() {
    let app = spawn_pool_app().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = probe_server(&app, "u", Some("none")).await;
    let dial = probe(
        &app,
        "u",
        &server,
        "connect",
        json!({"host": "127.0.0.1", "port": port}),
    )
    .await;
    assert!(dial.is_err(), "{dial:?}");
    let fetched = probe(
        &app,
        "u",
        &server,
        "fetch",
        json!({"url": format!("http://127.0.0.1:{port}/")}),
    )
    .await;
    assert!(fetched.is_err(), "{fetched:?}");
}

#[tokio::test]
async fn host_network_is_an_admins_explicit_choice_and_reaches_loopback() {
    let app = spawn_pool_app().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = probe_server(&app, "u", Some("host")).await;
    let dial = probe(
        &app,
        "u",
        &server,
        "connect",
        json!({"host": "127.0.0.1", "port": port}),
    )
    .await;
    assert!(dial.is_ok(), "{dial:?}");
    let preset = app.admin(Method::GET, "/admin/presets/probe", None).await;
    assert_eq!(preset.body["sandbox"]["network"], "host", "{}", preset.text);
}

/// Names a hostile server might fetch, and where they really lead.
pub struct Names(pub HashMap<&'static str, IpAddr>);

impl NameLookup for Names {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let answer = self.0.get(host).copied();
        Box::pin(async move {
            answer
                .map(|ip| vec![ip])
                .ok_or_else(|| std::io::Error::other("no such name"))
        })
    }
}

/// An HTTP server on `ip` answering every request `200 hello from <ip>`.
pub async fn web_server(ip: IpAddr) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = socket.read(&mut buffer).await;
                let body = format!("hello from {ip}");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn egress_goes_only_where_the_url_policy_lets_it() {
    let allowed = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let names = Names(HashMap::from([
        ("allowed.example", allowed),
        ("sneaky.example", IpAddr::V4(Ipv4Addr::LOCALHOST)),
        (
            "metadata.example",
            IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
        ),
    ]));
    // The default policy (no loopback), with one address an operator allowed.
    let app = spawn_app_resolving(Some(Arc::new(names)), |s| {
        s.security.allowed_url_hosts = vec!["allowed.example".into()];
    })
    .await;
    let allowed_port = web_server(allowed).await;
    let service_port: u16 = app.address.rsplit(':').next().unwrap().parse().unwrap();
    let server = probe_server(&app, "u", Some("egress")).await;

    let ok = probe(
        &app,
        "u",
        &server,
        "fetch",
        json!({"url": format!("http://allowed.example:{allowed_port}/")}),
    )
    .await;
    assert_eq!(ok.as_deref(), Ok("200 hello from 127.0.0.2"));
    for refused in [
        format!("http://sneaky.example:{service_port}/healthz"),
        "http://metadata.example/latest/meta-data/".to_owned(),
        format!("http://127.0.0.1:{service_port}/healthz"),
    ] {
        let answer = probe(&app, "u", &server, "fetch", json!({"url": refused})).await;
        assert!(
            answer.as_ref().is_ok_and(|t| t.starts_with("403 refused")),
            "{refused}: {answer:?}"
        );
    }
    // No way around the proxy: its own loopback is not the host's.
    let dial = probe(
        &app,
        "u",
        &server,
        "connect",
        json!({"host": "127.0.0.1", "port": service_port}),
    )
    .await;
    assert!(dial.is_err(), "{dial:?}");
}

#[tokio::test]
async fn a_presets_host_allow_list_narrows_egress() {
    let app = spawn_pool_app_with(|_| {}).await;
    let port = web_server(IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    app.create_preset_ok(json!({
        "name": "listed",
        "command": fixture_binary(),
        "args": ["stdio", "--probe-tools"],
        "sandbox": {"network": "egress", "allowHosts": ["localhost"]},
    }))
    .await;
    let server = app
        .create_server_ok("u", json!({"name": "listed", "preset": "listed"}))
        .await;
    let listed = probe(
        &app,
        "u",
        &server,
        "fetch",
        json!({"url": format!("http://localhost:{port}/")}),
    )
    .await;
    assert_eq!(listed.as_deref(), Ok("200 hello from 127.0.0.1"));
    let other = probe(
        &app,
        "u",
        &server,
        "fetch",
        json!({"url": format!("http://127.0.0.1:{port}/")}),
    )
    .await;
    assert!(
        other
            .as_ref()
            .is_ok_and(|t| t.starts_with("403") && t.contains("allow list")),
        "{other:?}"
    );
}

#[tokio::test]
async fn a_presets_sandbox_is_checked() {
    let app = spawn_pool_app().await;
    for (sandbox, says) in [
        (json!({"network": "everywhere"}), "not none, egress or host"),
        (
            json!({"readOnlyPaths": ["relative/path"]}),
            "not an absolute path",
        ),
        (json!({"writablePaths": ["/proc/1"]}), "part of the sandbox"),
        (
            json!({"network": "host", "allowHosts": ["a.example"]}),
            "applies only to network",
        ),
    ] {
        let reply = app
            .admin(
                Method::POST,
                "/admin/presets",
                Some(json!({"name": "bad", "command": "x", "sandbox": sandbox})),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.code(), "VALIDATION_ERROR");
        assert!(reply.text.contains(says), "{}", reply.text);
    }
}

#[tokio::test]
async fn where_no_sandbox_can_be_made_stdio_servers_do_not_start_and_say_why() {
    let app = spawn_pool_app_with(|s| s.pool.sandbox.bwrap = "/nonexistent/bwrap".into()).await;
    let ready = app.send(Method::GET, "/readyz", None, None, None).await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(ready.body["sandbox"]["isolated"], false, "{}", ready.text);
    assert!(
        ready.body["sandbox"]["problem"]
            .as_str()
            .unwrap()
            .contains("pool.sandbox.mode"),
        "{}",
        ready.text
    );
    let server = probe_server(&app, "u", None).await;
    let reply = app.connect("u", &server).await;
    assert!(!reply.status.is_success(), "{}", reply.text);
    assert_eq!(reply.code(), "MCP_CONNECTION_ERROR");
    assert!(
        reply.text.contains("need a sandbox") && reply.text.contains("pool.sandbox.mode"),
        "{}",
        reply.text
    );
}

#[tokio::test]
async fn with_the_sandbox_off_servers_run_unisolated_and_readiness_says_so() {
    let app =
        spawn_pool_app_with(|s| s.pool.sandbox.mode = mcp_pool::config::SandboxMode::Off).await;
    let ready = app.send(Method::GET, "/readyz", None, None, None).await;
    assert_eq!(ready.body["sandbox"]["mode"], "off", "{}", ready.text);
    assert_eq!(ready.body["sandbox"]["isolated"], false);
    let server = probe_server(&app, "u", None).await;
    let environment = probe(&app, "u", &server, "identity", json!({}))
        .await
        .unwrap();
    assert!(!environment.starts_with("uid=1000 "), "{environment}");
}
