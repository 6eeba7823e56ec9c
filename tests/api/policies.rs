//! The operator's policy rules from outside: each outcome on each path (REST, a model's
//! tool calls, the gateway, gRPC), tools hidden from the model, a call approved while
//! parked checked again, dry run, rules over servers, a bad rule refused with its
//! position, the test form, and a change reaching another instance.

use reqwest::{Method, StatusCode};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{TestApp, spawn_pool_app};

async fn set_rules(app: &TestApp, rules: Value) -> Value {
    crate::governance::set_policies(app, json!({ "rules": rules })).await
}

async fn set_plan(app: &TestApp, user: &str, plan: &str) {
    crate::governance::set_attributes(app, user, &["customers"], plan).await;
}

/// `u`'s gRPC call of `add` on `server`, refused: its status.
pub(crate) async fn grpc_add_refused(app: &TestApp, server: &str) -> tonic::Status {
    let mut grpc = crate::grpc::client(app).await;
    grpc.call_tool(crate::grpc::as_user(
        app,
        "u",
        mcp_pool::grpc::proto::CallToolRequest {
            server_id: server.to_owned(),
            tool_name: "add".into(),
            arguments_json: r#"{"a": 1, "b": 2}"#.into(),
            ..Default::default()
        },
    ))
    .await
    .unwrap_err()
}

/// The assistant's tool names as the REST API offers them to a model.
async fn offered(app: &TestApp, user: &str) -> Vec<String> {
    let reply = app
        .user(
            user,
            Method::GET,
            "/api/assistants/a1/tools?format=mcp",
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

const NO_ADD_ON_FREE: &str = r#"user.plan == "free" && tool.name == "add""#;

#[tokio::test]
async fn a_denying_rule_refuses_the_call_on_every_path_and_hides_the_tool() {
    let app = spawn_pool_app().await;
    let server = app.fixture_for_a1(&["echo", "add"]).await;
    set_plan(&app, "u", "free").await;
    assert!(
        offered(&app, "u")
            .await
            .contains(&"mcp__fx__add".to_owned())
    );
    set_rules(
        &app,
        json!([
            {"name": "no-add-on-free", "when": NO_ADD_ON_FREE, "action": "deny",
             "description": "the free plan cannot add"},
            {"name": "no-secrets", "action": "deny",
             "when": "tool.name == \"echo\" && has(arguments.text) && arguments.text.contains(\"secret\")"}
        ]),
    )
    .await;

    // REST: 403 naming the rule; another tool of the same server still runs.
    let refused = app.call("u", &server, "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::FORBIDDEN, "POLICY_DENIED"),
        "{}",
        refused.text
    );
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no-add-on-free") && message.contains("the free plan cannot add"),
        "{message}"
    );
    let echoed = app
        .call("u", &server, "echo", json!({"text": "still fine"}))
        .await;
    assert_eq!(echoed.status, StatusCode::OK, "{}", echoed.text);

    // Not offered to the model.
    let tools = offered(&app, "u").await;
    assert!(
        !tools.contains(&"mcp__fx__add".to_owned()) && tools.contains(&"mcp__fx__echo".to_owned()),
        "{tools:?}"
    );

    // A model's tool calls: a hidden tool is unknown to it; a call a rule refuses for its
    // arguments is a failed record the model can read, nothing parked or run.
    let message_id = Uuid::new_v4().to_string();
    let submitted = app
        .submit_calls(
            "u",
            &message_id,
            "",
            json!([
                {"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}},
                {"id": "c2", "name": "mcp__fx__echo", "arguments": {"text": "a secret"}},
                {"id": "c3", "name": "mcp__fx__echo", "arguments": {"text": "harmless"}}
            ]),
        )
        .await;
    let records = submitted.body["toolCalls"].as_array().unwrap();
    assert_eq!(records[0]["status"], "error", "{}", submitted.text);
    assert!(
        records[0]["response"].to_string().contains("Unknown"),
        "{}",
        records[0]
    );
    assert_eq!(records[1]["status"], "error", "{}", submitted.text);
    assert!(
        records[1]["response"]
            .to_string()
            .contains("POLICY_DENIED: refused by policy rule 'no-secrets'"),
        "{}",
        records[1]
    );
    assert_ne!(records[2]["status"], "error", "{}", submitted.text);

    // The gateway: not listed, and a call is an error result the model can read.
    let token = app.gateway_token("u", "a1").await;
    let client = crate::gateway::connect(&app, "a1", &token).await;
    let listed = client.list_all_tools().await.unwrap();
    assert!(listed.iter().all(|t| t.name != "fx__add"), "{listed:?}");
    let mut params = CallToolRequestParams::new("fx__echo");
    params.arguments = json!({"text": "my secret"}).as_object().cloned();
    let result = client.call_tool(params).await.unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text = format!("{:?}", result.content);
    assert!(
        text.contains("POLICY_DENIED") && text.contains("no-secrets"),
        "{text}"
    );
    client.cancel().await.ok();

    // gRPC.
    let denied = grpc_add_refused(&app, &server).await;
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert_eq!(crate::grpc::error_code(&denied), "POLICY_DENIED");

    // A user on another plan is not concerned.
    let theirs = app
        .create_server_ok("v", json!({"name": "fx", "preset": "fixture"}))
        .await;
    set_plan(&app, "v", "pro").await;
    let added = app.call("v", &theirs, "add", json!({"a": 2, "b": 2})).await;
    assert_eq!(added.status, StatusCode::OK, "{}", added.text);
}

#[tokio::test]
async fn require_approval_parks_auto_approved_calls_and_refuses_calls_that_cannot_wait() {
    let app = spawn_pool_app().await;
    let server = app.fixture_for_a1(&["echo", "add"]).await;
    set_rules(
        &app,
        json!([{"name": "adding-asks", "when": "tool.name == \"add\"", "action": "require_approval"}]),
    )
    .await;
    let message_id = Uuid::new_v4().to_string();
    let submitted = app
        .submit_calls(
            "u",
            &message_id,
            "",
            json!([
                {"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}},
                {"id": "c2", "name": "mcp__fx__echo", "arguments": {"text": "runs"}}
            ]),
        )
        .await;
    let records = submitted.body["toolCalls"].as_array().unwrap();
    assert_eq!(
        records[0]["status"], "pending",
        "auto-approved, but the rule asks: {}",
        submitted.text
    );
    assert_ne!(records[1]["status"], "pending", "{}", submitted.text);
    app.confirm_ok(&message_id, "c1", true).await;
    crate::upstreams::eventually("the approved call runs", || async {
        app.call_record(&message_id, "c1").await["status"] == "done"
    })
    .await;
    let direct = app.call("u", &server, "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(
        (direct.status, direct.code()),
        (StatusCode::FORBIDDEN, "POLICY_APPROVAL_REQUIRED"),
        "{}",
        direct.text
    );
}

#[tokio::test]
async fn a_call_approved_while_parked_is_checked_again_when_it_runs() {
    let app = spawn_pool_app().await;
    app.fixture_for_a1(&[]).await;
    let message_id = Uuid::new_v4().to_string();
    let submitted = app
        .submit_calls(
            "u",
            &message_id,
            "",
            json!([{"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}}]),
        )
        .await;
    assert_eq!(
        submitted.body["toolCalls"][0]["status"], "pending",
        "{}",
        submitted.text
    );
    set_rules(
        &app,
        json!([{"name": "no-add", "when": "tool.name == \"add\"", "action": "deny"}]),
    )
    .await;
    app.confirm_ok(&message_id, "c1", true).await;
    crate::upstreams::eventually("the approved call is refused", || async {
        let record = app.call_record(&message_id, "c1").await;
        record["status"] == "error" && record["response"].to_string().contains("no-add")
    })
    .await;
}

#[tokio::test]
async fn a_dry_run_rule_refuses_nothing_and_is_counted() {
    let app = spawn_pool_app().await;
    let server = app.fixture_for_a1(&["add"]).await;
    set_rules(
        &app,
        json!([{"name": "would-stop-adding", "when": "tool.name == \"add\"", "action": "deny", "dryRun": true}]),
    )
    .await;
    let added = app.call("u", &server, "add", json!({"a": 1, "b": 2})).await;
    assert_eq!(added.status, StatusCode::OK, "{}", added.text);
    assert!(
        offered(&app, "u")
            .await
            .contains(&"mcp__fx__add".to_owned())
    );
    let metrics = app.send(Method::GET, "/metrics", None, None, None).await;
    let line = metrics
        .text
        .lines()
        .find(|l| {
            l.starts_with("mcp_pool_policy_decisions_total")
                && l.contains("would-stop-adding")
                && l.contains("dry_run")
        })
        .unwrap_or_else(|| panic!("no dry-run count in:\n{}", metrics.text));
    let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 1.0, "{line}");
}

#[tokio::test]
async fn a_server_rule_refuses_a_server_a_plan_may_not_have() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(crate::upstreams::fixture_preset())
        .await;
    set_plan(&app, "free-user", "free").await;
    set_plan(&app, "pro-user", "pro").await;
    set_rules(
        &app,
        json!([{"name": "no-fixture-on-free", "on": "server", "action": "deny",
                "when": "user.plan == \"free\" && server.preset == \"fixture\""}]),
    )
    .await;
    let refused = app
        .create_server("free-user", json!({"name": "fx", "preset": "fixture"}))
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::FORBIDDEN, "POLICY_DENIED"),
        "{}",
        refused.text
    );
    app.create_server_ok("pro-user", json!({"name": "fx", "preset": "fixture"}))
        .await;
    // A server the free user may have, changed into one they may not.
    let remote = app
        .create_server_ok("free-user", crate::helpers::remote_server("r"))
        .await;
    let changed = app
        .user(
            "free-user",
            Method::PUT,
            &format!("/api/mcp-servers/{remote}"),
            Some(json!({"preset": "fixture", "type": "stdio"})),
        )
        .await;
    assert_eq!(changed.code(), "POLICY_DENIED", "{}", changed.text);
}

#[tokio::test]
async fn a_rule_that_does_not_compile_is_refused_with_its_position_and_the_test_form_answers() {
    let app = spawn_pool_app().await;
    let bad = app
        .admin(
            Method::PUT,
            "/admin/policies",
            Some(json!({"rules": [
                {"name": "fine", "when": "true", "action": "allow"},
                {"name": "broken", "when": "tool.name == ", "action": "deny"}
            ]})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
    let message = bad.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("rules[1].when ('broken'): line 1, column"),
        "{message}"
    );
    let unchanged = app.admin(Method::GET, "/admin/policies", None).await;
    assert_eq!(
        unchanged.body["version"], 0,
        "nothing was saved: {}",
        unchanged.text
    );
    let twice = app
        .admin(
            Method::PUT,
            "/admin/policies",
            Some(json!({"rules": [
                {"name": "same", "when": "true", "action": "allow"},
                {"name": "same", "when": "false", "action": "deny"}
            ]})),
        )
        .await;
    assert_eq!(twice.code(), "VALIDATION_ERROR", "{}", twice.text);

    let saved = set_rules(
        &app,
        json!([
            {"name": "destructive-asks", "action": "require_approval",
             "when": "tool.annotations.destructiveHint && !tool.annotations.readOnlyHint"},
            {"name": "no-etc", "action": "deny",
             "when": "has(arguments.path) && arguments.path.startsWith(\"/etc\")"}
        ]),
    )
    .await;
    assert_eq!(saved["version"], 1, "{saved}");
    let test = |call: Value| {
        let app = &app;
        async move {
            let reply = app
                .admin(
                    Method::POST,
                    "/admin/policies/test",
                    Some(json!({ "call": call })),
                )
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            reply.body
        }
    };
    // No annotations: destructive by the specification's default.
    let destructive = test(json!({"tool": {"name": "write_file"}})).await;
    assert_eq!(
        (destructive["action"].as_str(), destructive["rule"].as_str()),
        (Some("require_approval"), Some("destructive-asks"))
    );
    let reading = test(
        json!({"tool": {"name": "read_file", "annotations": {"readOnlyHint": true}},
                              "arguments": {"path": "/etc/passwd"}}),
    )
    .await;
    assert_eq!(reading["rule"], "no-etc", "{reading}");
    let fine = test(
        json!({"tool": {"name": "read_file", "annotations": {"readOnlyHint": true}},
                           "arguments": {"path": "/srv/a"}}),
    )
    .await;
    assert_eq!(
        (fine["action"].as_str(), fine.get("rule")),
        (Some("allow"), None),
        "{fine}"
    );
}

#[tokio::test]
async fn a_rule_change_reaches_another_instance_within_seconds() {
    let a = spawn_pool_app().await;
    let server = a.fixture_for_a1(&["add"]).await;
    let b = a.another_instance().await;
    let before = b.call("u", &server, "add", json!({"a": 1, "b": 1})).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.text);
    set_rules(
        &a,
        json!([{"name": "no-add", "when": "tool.name == \"add\"", "action": "deny"}]),
    )
    .await;
    crate::upstreams::eventually("the other instance applies the new rule", || async {
        b.call("u", &server, "add", json!({"a": 1, "b": 1}))
            .await
            .code()
            == "POLICY_DENIED"
    })
    .await;
    b.stop().await;
    a.stop().await;
}
