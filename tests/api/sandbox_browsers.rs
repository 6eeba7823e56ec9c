//! The browser servers, the most used and the most dangerous (their code tools run
//! JavaScript in the server's own Node process), run sandboxed: Playwright MCP's
//! `browser_run_code_unsafe` (real package, Debian's chromium) reaches nothing of the
//! service or of other users, and both Playwright MCP and Chrome DevTools MCP still
//! drive their browser, keeping its profile in the server's private home.

use std::path::PathBuf;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app};
use crate::sandbox::walk;
use crate::upstreams::text_of;

fn browsers() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browsers/node_modules");
    assert!(
        dir.join("@playwright/mcp").exists() && dir.join("chrome-devtools-mcp").exists(),
        "the browser servers are not installed: run tests/setup.sh (or .ci/run)"
    );
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "chromium is not installed: run tests/setup.sh (or .ci/run)"
    );
    dir
}

async fn playwright(app: &TestApp, user: &str) -> String {
    let cli = browsers().join("@playwright/mcp/cli.js");
    let preset = json!({
        "name": "playwright",
        "command": "node",
        "args": [cli, "--headless", "--no-sandbox", "--browser", "chromium", "--executable-path", "/usr/bin/chromium"],
    });
    let made = app
        .admin(reqwest::Method::POST, "/admin/presets", Some(preset))
        .await;
    assert!(
        made.status == StatusCode::CREATED || made.status == StatusCode::CONFLICT,
        "{}",
        made.text
    );
    app.create_server_ok(user, json!({"name": "browser", "preset": "playwright"}))
        .await
}

async fn call_ok(app: &TestApp, user: &str, server: &str, tool: &str, arguments: Value) -> String {
    let reply = app.call(user, server, tool, arguments).await;
    assert_eq!(reply.status, StatusCode::OK, "{tool}: {}", reply.text);
    assert_ne!(reply.body["isError"], true, "{tool}: {}", reply.text);
    reply.body["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|| text_of(&reply.body).to_owned())
}

/// Playwright MCP answers `### Result` and the returned value as a JSON string on the
/// next line.
fn outcomes(text: &str) -> serde_json::Map<String, Value> {
    let line = text
        .lines()
        .skip_while(|line| !line.starts_with("### Result"))
        .nth(1)
        .unwrap_or_else(|| panic!("no result in: {text}"));
    let returned: String = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"));
    serde_json::from_str::<Value>(&returned)
        .unwrap_or_else(|e| panic!("{e}: {returned}"))
        .as_object()
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn playwrights_code_tool_reaches_nothing_of_the_service_or_of_other_users() {
    let app = spawn_pool_app().await;
    let data_dir = app.settings.storage.data_dir.canonicalize().unwrap();
    let port: u16 = app.address.rsplit(':').next().unwrap().parse().unwrap();

    // Alice's server writes a file in her home; mallory then goes looking for it.
    let alice = playwright(&app, "alice").await;
    call_ok(&app, "alice", &alice, "browser_run_code_unsafe", json!({"code":
        "async (page) => { const p = page.constructor.constructor('return process')(); p.getBuiltinModule('fs').writeFileSync('/home/mcp/diary.txt', 'alice'); return 'ok'; }"
    })).await;
    let diary = walk(&data_dir.join("work"))
        .into_iter()
        .find(|p| p.ends_with("diary.txt"))
        .expect("alice's file is in her home");

    let mallory = playwright(&app, "mallory").await;
    let code = format!(
        r#"async (page) => {{
  const p = page.constructor.constructor('return process')();
  const fs = p.getBuiltinModule('fs');
  const net = p.getBuiltinModule('net');
  const attempt = (f) => {{ try {{ return String(f()).slice(0, 40); }} catch (e) {{ return 'ERR ' + e.code; }} }};
  const dial = () => new Promise((resolve) => {{
    const s = net.connect({port}, '127.0.0.1');
    s.on('connect', () => {{ s.destroy(); resolve('connected'); }});
    s.on('error', (e) => resolve('ERR ' + e.code));
  }});
  await page.goto('data:text/html,<title>sandboxed</title>');
  return JSON.stringify({{
    key: attempt(() => fs.readFileSync({key:?}, 'utf8')),
    environ: attempt(() => fs.readFileSync('/proc/{pid}/environ', 'utf8')),
    diary: attempt(() => fs.readFileSync({diary:?}, 'utf8')),
    planted: attempt(() => fs.writeFileSync({planted:?}, 'x')),
    port: await dial(),
    home: p.env.HOME,
    adminKey: String(Object.keys(p.env).filter((k) => k.startsWith('MCP_POOL') || k.startsWith('CARGO')).length),
    title: await page.title(),
  }});
}}"#,
        key = data_dir.join("encryption.key").display().to_string(),
        pid = std::process::id(),
        diary = diary.display().to_string(),
        planted = data_dir.join("planted").display().to_string(),
    );
    let text = call_ok(
        &app,
        "mallory",
        &mallory,
        "browser_run_code_unsafe",
        json!({"code": code}),
    )
    .await;
    let seen = outcomes(&text);
    for refused in ["key", "environ", "diary", "planted", "port"] {
        assert!(
            seen[refused].as_str().unwrap().starts_with("ERR"),
            "{refused}: {text}"
        );
    }
    assert!(!data_dir.join("planted").exists());
    assert_eq!(seen["home"], "/home/mcp", "{text}");
    assert_eq!(seen["adminKey"], "0", "{text}");
    // The browser itself works in there.
    assert_eq!(seen["title"], "sandboxed", "{text}");
}

#[tokio::test]
async fn chrome_devtools_mcp_drives_its_browser_with_its_profile_in_its_home() {
    let app = spawn_pool_app().await;
    let bin = browsers().join("chrome-devtools-mcp/build/src/bin/chrome-devtools-mcp.js");
    app.create_preset_ok(json!({
        "name": "devtools",
        "command": "node",
        "args": [bin, "--headless", "--executablePath", "/usr/bin/chromium", "--chrome-arg=--no-sandbox"],
    }))
    .await;
    let server = app
        .create_server_ok("u", json!({"name": "devtools", "preset": "devtools"}))
        .await;
    call_ok(
        &app,
        "u",
        &server,
        "new_page",
        json!({"url": "data:text/html,<title>in its sandbox</title><p>hello</p>"}),
    )
    .await;
    let pages = call_ok(&app, "u", &server, "list_pages", json!({})).await;
    assert!(pages.contains("data:text/html"), "{pages}");
    let profile = walk(&app.settings.storage.data_dir.join("work"))
        .into_iter()
        .any(|p| {
            p.to_string_lossy()
                .contains("chrome-devtools-mcp/chrome-profile")
        });
    assert!(profile, "the browser profile is in the server's home");
}
