//! Per-assistant tool curation (issue 41, §3): a user renames a tool, replaces its
//! description, hides and pins tools for one assistant; REST model formats, model calls
//! and the gateway follow, while calls, approval and the audit keep the real tool.

use reqwest::{Method, StatusCode};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::gateway::connect;
use crate::helpers::{TestApp, spawn_pool_app};

pub(crate) async fn put_overrides(
    app: &TestApp,
    user: &str,
    overrides: Value,
) -> crate::helpers::Reply {
    app.user(
        user,
        Method::PUT,
        "/api/assistants/a1/tool-overrides",
        Some(json!({ "overrides": overrides })),
    )
    .await
}

/// The names and descriptions `a1` offers in the OpenAI format.
async fn offered(app: &TestApp) -> Vec<(String, String)> {
    let tools = app
        .user(
            "u",
            Method::GET,
            "/api/assistants/a1/tools?format=openai",
            None,
        )
        .await;
    assert_eq!(tools.status, StatusCode::OK, "{}", tools.text);
    tools.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["function"]["name"].as_str().unwrap().to_owned(),
                t["function"]["description"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_curated_assistant_offers_renamed_redescribed_tools_and_hides_others_everywhere() {
    let app = spawn_pool_app().await;
    let fx = app.fixture_for_a1(&["echo"]).await;
    let before = offered(&app).await;
    assert!(
        before.iter().any(|(n, _)| n == "mcp__fx__echo"),
        "{before:?}"
    );
    assert!(
        before.iter().any(|(n, _)| n == "mcp__fx__slow"),
        "{before:?}"
    );

    let saved = put_overrides(
        &app,
        "u",
        json!([
            {"serverId": fx, "tool": "echo", "name": "say", "pinned": true},
            {"serverId": fx, "tool": "add", "description": "Adds two whole numbers for the accountant."},
            {"serverId": fx, "tool": "slow", "hidden": true},
        ]),
    )
    .await;
    assert_eq!(saved.status, StatusCode::OK, "{}", saved.text);
    let read = app
        .user("u", Method::GET, "/api/assistants/a1/tool-overrides", None)
        .await;
    assert_eq!(read.body["overrides"], saved.body["overrides"]);
    assert_eq!(read.body["overrides"][0]["name"], "say");
    assert_eq!(read.body["overrides"][0]["pinned"], true);

    // REST model formats.
    let after = offered(&app).await;
    let names: Vec<&str> = after.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"say"), "{names:?}");
    assert!(!names.contains(&"mcp__fx__echo"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("slow")), "{names:?}");
    let add = after
        .iter()
        .find(|(n, _)| n == "mcp__fx__add")
        .expect("add");
    assert_eq!(add.1, "Adds two whole numbers for the accountant.");
    for format in ["anthropic", "mcp"] {
        let tools = app
            .user(
                "u",
                Method::GET,
                &format!("/api/assistants/a1/tools?format={format}"),
                None,
            )
            .await;
        assert!(tools.text.contains("\"say\""), "{format}: {}", tools.text);
        assert!(
            !tools.text.contains("mcp__fx__slow"),
            "{format}: {}",
            tools.text
        );
    }

    // A model's call of the new name reaches the real tool, auto-approved by its real name;
    // the hidden tool is unknown to the model.
    let message = uuid::Uuid::now_v7().to_string();
    let ran = app
        .submit_calls(
            "u",
            &message,
            "?wait=20",
            json!([
                {"id": "c1", "name": "say", "arguments": {"text": "curated"}},
                {"id": "c2", "name": "mcp__fx__slow", "arguments": {"ms": 1}},
            ]),
        )
        .await;
    assert_eq!(ran.status, StatusCode::OK, "{}", ran.text);
    let say = &ran.body["toolCalls"][0];
    assert_eq!(say["status"], "done", "{}", ran.text);
    assert_eq!(say["toolName"], "echo");
    assert_eq!(say["displayName"], "say");
    assert!(say["response"].to_string().contains("curated"), "{say}");
    assert_eq!(ran.body["toolCalls"][1]["status"], "error", "{}", ran.text);

    // The gateway: the same names, the hidden tool neither listed nor callable.
    let token = app.gateway_token("u", "a1").await;
    let client = connect(&app, "a1", &token).await;
    let tools = client.list_all_tools().await.unwrap();
    let gateway_names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(gateway_names.contains(&"say"), "{gateway_names:?}");
    assert!(!gateway_names.contains(&"fx__echo"), "{gateway_names:?}");
    assert!(!gateway_names.contains(&"fx__slow"), "{gateway_names:?}");
    let add = tools.iter().find(|t| t.name == "fx__add").expect("fx__add");
    assert_eq!(
        add.description.as_deref(),
        Some("Adds two whole numbers for the accountant.")
    );
    let mut params = CallToolRequestParams::new("say");
    params.arguments = json!({"text": "through the gateway"}).as_object().cloned();
    let said = client.call_tool(params).await.unwrap();
    assert!(
        serde_json::to_string(&said.content)
            .unwrap()
            .contains("through the gateway"),
        "{said:?}"
    );
    let hidden = client
        .call_tool(CallToolRequestParams::new("fx__slow"))
        .await
        .unwrap_err();
    assert!(hidden.to_string().contains("fx__slow"), "{hidden}");

    // The audit names the real tool.
    let audit = app
        .admin(
            Method::GET,
            "/admin/audit?userId=u&tool=echo&pageSize=50",
            None,
        )
        .await;
    assert!(
        audit.body["entries"].as_array().unwrap().len() >= 2,
        "the model's and the gateway's calls of 'say' are echo's: {}",
        audit.text
    );

    // Cleared: the server's names again.
    let cleared = put_overrides(&app, "u", json!([])).await;
    assert_eq!(cleared.status, StatusCode::OK, "{}", cleared.text);
    let names: Vec<String> = offered(&app).await.into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"mcp__fx__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"mcp__fx__slow".to_owned()), "{names:?}");
}

#[tokio::test]
async fn a_bad_override_is_refused_whole_naming_the_entry() {
    let app = spawn_pool_app().await;
    let fx = app.fixture_for_a1(&[]).await;
    let other = app
        .create_server_ok("someone", json!({"name": "theirs", "preset": "fixture"}))
        .await;
    let cases = [
        (
            json!([{"serverId": fx, "tool": "echo", "name": "has space"}]),
            "overrides[0].name",
        ),
        (
            json!([
                {"serverId": fx, "tool": "echo", "name": "same"},
                {"serverId": fx, "tool": "add", "name": "same"},
            ]),
            "overrides[1].name",
        ),
        (json!([{"serverId": fx, "tool": "echo"}]), "sets nothing"),
        (
            json!([{"serverId": fx, "tool": "echo", "hidden": true, "pinned": true}]),
            "cannot be pinned",
        ),
        (
            json!([{"serverId": "not-a-uuid", "tool": "echo", "hidden": true}]),
            "overrides[0].serverId",
        ),
        (
            json!([{"serverId": other, "tool": "echo", "hidden": true}]),
            "not one of your MCP servers",
        ),
        (
            json!([{"serverId": fx, "tool": "", "hidden": true}]),
            "overrides[0].tool",
        ),
    ];
    for (overrides, said) in cases {
        let refused = put_overrides(&app, "u", overrides.clone()).await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{overrides}: {}",
            refused.text
        );
        assert_eq!(refused.code(), "VALIDATION_ERROR");
        assert!(refused.text.contains(said), "{overrides}: {}", refused.text);
    }
    let unknown_field = put_overrides(
        &app,
        "u",
        json!([{"serverId": fx, "tool": "echo", "rename": "x"}]),
    )
    .await;
    assert!(
        unknown_field.status.is_client_error(),
        "{}",
        unknown_field.text
    );
    // Nothing was saved.
    let read = app
        .user("u", Method::GET, "/api/assistants/a1/tool-overrides", None)
        .await;
    assert_eq!(read.body["overrides"], json!([]), "{}", read.text);
}
