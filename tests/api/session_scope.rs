//! `sessionScope = conversation`: each gateway session and each chat conversation of a
//! user gets its own upstream session of a stateful server (here its own stdio process),
//! under the same pool; a `user`-scoped server keeps one session for all of them. A
//! gateway session's upstream sessions end with it.

use reqwest::{Method, StatusCode};
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::gateway::connect;
use crate::helpers::{TestApp, spawn_pool_app};
use crate::upstreams::{eventually, fixture_preset, process_exists};

/// `u`'s assistant `a1` bound to two stdio fixtures, `shared` (sessionScope `user`) and
/// `own` (`conversation`), `pid` auto-approved on both; returns a gateway token.
async fn scoped_app() -> (TestApp, String) {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let mut ids = Vec::new();
    for (name, scope) in [("shared", "user"), ("own", "conversation")] {
        ids.push(
            app.create_server_ok(
                "u",
                json!({"name": name, "preset": "fixture", "sessionScope": scope,
                       "autoApproveTools": ["pid"]}),
            )
            .await,
        );
    }
    let shown = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{}", ids[1]),
            None,
        )
        .await;
    assert_eq!(shown.body["sessionScope"], "conversation", "{}", shown.text);
    app.bind_ok("u", "a1", [&ids[0], &ids[1]]).await;
    let created = app
        .user(
            "u",
            Method::POST,
            "/api/assistants/a1/gateway-tokens",
            Some(json!({"name": "tabs"})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    (app, created.body["token"].as_str().unwrap().to_owned())
}

async fn pid_through(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
) -> String {
    let result = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()))
        .await
        .unwrap();
    result.content[0].as_text().unwrap().text.clone()
}

#[tokio::test]
async fn each_gateway_session_gets_its_own_session_of_a_conversation_scoped_server() {
    let (app, token) = scoped_app().await;
    let first = connect(&app, "a1", &token).await;
    let second = connect(&app, "a1", &token).await;

    let own = (
        pid_through(&first, "own__pid").await,
        pid_through(&second, "own__pid").await,
    );
    assert_ne!(
        own.0, own.1,
        "two tabs, two processes of the stateful server"
    );
    assert_eq!(
        own.0,
        pid_through(&first, "own__pid").await,
        "a tab keeps its own"
    );
    let shared = (
        pid_through(&first, "shared__pid").await,
        pid_through(&second, "shared__pid").await,
    );
    assert_eq!(shared.0, shared.1, "a user-scoped server is shared");

    let connections = app.connections().await;
    let scoped: Vec<_> = connections
        .iter()
        .filter(|c| c["scope"].is_string())
        .collect();
    assert_eq!(scoped.len(), 2, "{connections:?}");
    assert!(
        scoped.iter().all(|c| c["serverName"] == "own"),
        "{connections:?}"
    );

    // Their processes on the host, as the admin API shows them.
    let host_pids: Vec<u32> = scoped
        .iter()
        .map(|c| c["pid"].as_u64().unwrap() as u32)
        .collect();
    let shared_pid = connections
        .iter()
        .find(|c| c["serverName"] == "shared")
        .and_then(|c| c["pid"].as_u64())
        .unwrap() as u32;

    // The first tab closes: its process goes, the other tab's stays.
    first.cancel().await.unwrap();
    eventually("the closed session's process is gone", || async {
        host_pids.iter().filter(|pid| process_exists(**pid)).count() == 1
    })
    .await;
    assert_eq!(pid_through(&second, "own__pid").await, own.1);
    assert!(process_exists(shared_pid), "the shared session stays");
}

#[tokio::test]
async fn each_chat_conversation_gets_its_own_session_of_a_conversation_scoped_server() {
    use crate::llm_script::{ScriptedLlm, openai_text, openai_tool_calls};
    let llm = ScriptedLlm::openai().await;
    let app = crate::helpers::spawn_pool_app_with(|s| llm.configure(s, "scripted", &[])).await;
    app.create_preset_ok(fixture_preset()).await;
    let own = app
        .create_server_ok(
            "u",
            json!({"name": "own", "preset": "fixture", "sessionScope": "conversation",
                   "autoApproveTools": ["pid"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&own]).await;
    // One turn that calls `own__pid` in `conversation` (a new one when `None`).
    let turn = |conversation: Option<String>| {
        llm.push(openai_tool_calls("", &[("c1", "mcp__own__pid", json!({}))]));
        llm.push(openai_text("done"));
        let mut body = json!({"assistantId": "a1", "message": "pid?",
                              "model": {"provider": "scripted", "name": "m"}});
        if let Some(conversation) = conversation {
            body["conversationId"] = json!(conversation);
        }
        let app = &app;
        async move {
            let reply = app
                .user("u", Method::POST, "/api/chat/message", Some(body))
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            let pid = reply.body["toolCalls"][0]["response"][0]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("{}", reply.text))
                .to_owned();
            (
                reply.body["conversationId"].as_str().unwrap().to_owned(),
                pid,
            )
        }
    };
    let (first, first_pid) = turn(None).await;
    let (second, second_pid) = turn(None).await;
    assert_ne!(first, second);
    assert_ne!(first_pid, second_pid, "two conversations, two processes");
    let (_, again) = turn(Some(first.clone())).await;
    assert_eq!(again, first_pid, "a conversation keeps its own session");
    let connections = app.connections().await;
    let scopes: Vec<_> = connections.iter().map(|c| c["scope"].clone()).collect();
    assert!(
        scopes.contains(&json!(first)) && scopes.contains(&json!(second)),
        "{connections:?}"
    );
}
