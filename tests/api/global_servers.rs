//! Admin-defined global servers from a file, reloaded as a diff while the service runs.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app_with};
use crate::upstreams::{eventually, fixture_binary};

async fn tool_names(app: &TestApp) -> Vec<String> {
    let reply = app
        .user("u", Method::GET, "/api/assistants/a1/tools", None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// User `u`'s call of tool `name` for assistant `a1`, waited for: the tool call's record.
pub async fn call(app: &TestApp, name: &str, arguments: Value) -> Value {
    let message = uuid::Uuid::new_v4();
    let reply = app
        .user(
            "u",
            Method::POST,
            &format!("/api/messages/{message}/tool-calls?wait=20"),
            Some(json!({"assistantId": "a1", "calls": [{"id": "c", "name": name, "arguments": arguments}]})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body["toolCalls"][0].clone()
}

async fn status(app: &TestApp) -> Value {
    app.admin(Method::GET, "/admin/global-servers", None)
        .await
        .body
}

/// Writes the file the service polls as an editor saving it would: whole, by a rename, so
/// that a poll never reads it half-written.
fn replace_file(path: &std::path::Path, text: impl AsRef<[u8]>) -> std::io::Result<()> {
    let next = path.with_extension("toml.next");
    std::fs::write(&next, text)?;
    std::fs::rename(&next, path)
}

fn fixture_section(greeting: &str) -> String {
    format!(
        "[servers.fx]\ntype = \"stdio\"\ncommand = \"{}\"\nargs = [\"stdio\"]\nenv = {{ FIXTURE_GREETING = \"{greeting}\" }}\nauto_approve_tools = [\"pid\"]\n",
        fixture_binary()
    )
}

const CALC: &str = "[servers.calc]\ntype = \"embedded\"\nembedded = \"calculator\"\nauto_approve_tools = [\"add\"]\n";

#[tokio::test]
async fn global_servers_are_offered_to_every_assistant_and_reloaded_as_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("servers.toml");
    std::fs::write(&file, format!("{CALC}{}", fixture_section("one"))).unwrap();
    let path = file.display().to_string();
    let app = spawn_pool_app_with(|s| {
        s.global_servers.file = path;
        s.global_servers.poll_secs = 1;
    })
    .await;

    let names = tool_names(&app).await;
    assert!(
        names.contains(&"mcp__calc__add".to_owned()) && names.contains(&"mcp__fx__pid".to_owned()),
        "{names:?}"
    );
    assert_eq!(
        call(&app, "mcp__calc__add", json!({"a": 2, "b": 3})).await["response"][0]["text"],
        "5"
    );
    let fx_pid = call(&app, "mcp__fx__pid", json!({})).await["response"][0]["text"].clone();
    let calc_connected = |connections: &[Value]| {
        connections
            .iter()
            .find(|c| c["serverName"] == "calc" || c["server"]["name"] == "calc")
            .map(|c| c["connectedAt"].clone())
    };
    let before = calc_connected(&app.connections().await);
    assert!(before.is_some(), "{:?}", app.connections().await);

    // Change fx only: its connection restarts (a new process), calc's stays.
    replace_file(&file, format!("{CALC}{}", fixture_section("two"))).unwrap();
    eventually("the change is applied", || async {
        status(&app).await["loadedAt"] != Value::Null
            && call(&app, "mcp__fx__pid", json!({})).await["response"][0]["text"] != fx_pid
    })
    .await;
    assert_eq!(
        calc_connected(&app.connections().await),
        before,
        "calc was not restarted"
    );

    // A broken file is refused whole; the servers stay.
    replace_file(&file, "[servers.calc\n").unwrap();
    eventually("the error is reported", || async {
        status(&app).await["lastError"].is_string()
    })
    .await;
    assert!(
        tool_names(&app)
            .await
            .contains(&"mcp__calc__add".to_owned())
    );

    // Add one, remove one.
    replace_file(
        &file,
        format!("{CALC}[servers.clock]\ntype = \"embedded\"\nembedded = \"clock\"\n"),
    )
    .unwrap();
    eventually("clock added and fx removed", || async {
        let names = tool_names(&app).await;
        names.contains(&"mcp__clock__now".to_owned())
            && !names.iter().any(|n| n.starts_with("mcp__fx__"))
    })
    .await;
    let listed = status(&app).await;
    assert_eq!(listed["lastError"], Value::Null, "{listed}");
    let names: Vec<&str> = listed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["calc", "clock"]);
    // Service keys cannot see the admin view.
    let denied = app
        .user("u", Method::GET, "/admin/global-servers", None)
        .await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
}
