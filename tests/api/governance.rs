//! Quotas, redaction and team servers from outside: a quota counted across two instances
//! and refused with `Retry-After` on every path, a shared count, fields a rule keeps out
//! of the audit log, and a team server two members use with their own OAuth tokens.

use reqwest::{Method, StatusCode};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{TestApp, spawn_pool_app};
use crate::upstreams::{HttpUpstream, eventually};

pub(crate) async fn set_policies(app: &TestApp, body: Value) -> Value {
    let reply = app.admin(Method::PUT, "/admin/policies", Some(body)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body
}

pub(crate) async fn set_attributes(app: &TestApp, user: &str, groups: &[&str], plan: &str) {
    let reply = app
        .admin(
            Method::PUT,
            &format!("/admin/users/{user}/attributes"),
            Some(json!({"groups": groups, "plan": plan})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

fn add(a: i64, b: i64) -> Value {
    json!({"a": a, "b": b})
}

#[tokio::test]
async fn a_quota_counts_calls_on_every_instance_and_refuses_the_one_past_it() {
    let a = spawn_pool_app().await;
    let server = a.fixture_for_a1(&["add", "echo"]).await;
    let b = a.another_instance().await;
    set_attributes(&a, "u", &[], "free").await;
    let saved = set_policies(
        &a,
        json!({"rules": [], "quotas": [
            {"name": "free-daily", "when": "user.plan == \"free\"", "limit": 4, "window": "day",
             "description": "the free plan's calls"}
        ]}),
    )
    .await;
    assert_eq!(saved["quotas"][0]["per"], "user", "{saved}");
    // The other instance follows within a second.
    eventually("the other instance has the quota", || async {
        b.admin(Method::GET, "/admin/policies", None).await.body["version"] == saved["version"]
    })
    .await;

    // Two calls on each instance: the fourth is the last the quota allows.
    for app in [&a, &b, &a, &b] {
        let called = app.call("u", &server, "add", add(1, 2)).await;
        assert_eq!(called.status, StatusCode::OK, "{}", called.text);
    }
    for app in [&a, &b] {
        let refused = app.call("u", &server, "add", add(1, 2)).await;
        assert_eq!(
            (refused.status, refused.code()),
            (StatusCode::TOO_MANY_REQUESTS, "QUOTA_EXCEEDED"),
            "{}",
            refused.text
        );
        let wait: u64 = refused.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=86_400).contains(&wait), "Retry-After: {wait}");
        let message = refused.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("free-daily") && message.contains("at most 4 calls a day"),
            "{message}"
        );
    }

    // The gateway: an error result the model can read.
    let token = a.gateway_token("u", "a1").await;
    let client = crate::gateway::connect(&a, "a1", &token).await;
    let mut params = CallToolRequestParams::new("fx__add");
    params.arguments = add(1, 1).as_object().cloned();
    let result = client.call_tool(params).await.unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(
        format!("{:?}", result.content).contains("QUOTA_EXCEEDED"),
        "{result:?}"
    );
    client.cancel().await.ok();

    // A model's auto-approved call: a failed record saying why.
    let message_id = Uuid::new_v4().to_string();
    let submitted = b
        .submit_calls(
            "u",
            &message_id,
            "",
            json!([{"id": "c1", "name": "mcp__fx__echo", "arguments": {"text": "hi"}}]),
        )
        .await;
    eventually("the model's call is refused by the quota", || async {
        let record = b.call_record(&message_id, "c1").await;
        record["status"] == "error"
            && record["response"]
                .to_string()
                .contains("quota 'free-daily' is used up")
    })
    .await;
    drop(submitted);

    // gRPC: RESOURCE_EXHAUSTED.
    let refused = crate::policies::grpc_add_refused(&a, &server).await;
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert_eq!(crate::grpc::error_code(&refused), "QUOTA_EXCEEDED");

    // What the operator sees: the count, the limit, when it starts again.
    let used = a.admin(Method::GET, "/admin/users/u/quotas", None).await;
    assert_eq!(used.status, StatusCode::OK, "{}", used.text);
    let quota = &used.body["quotas"][0];
    assert_eq!(
        (quota["quota"]["name"].as_str(), quota["used"].as_u64()),
        (Some("free-daily"), Some(4)),
        "refused calls are not counted: {}",
        used.text
    );
    assert!(quota["resetsAt"].as_str().is_some(), "{}", used.text);

    // Another plan is not counted; raising the limit lets the user on at once.
    let theirs = b
        .create_server_ok("v", json!({"name": "fx", "preset": "fixture"}))
        .await;
    set_attributes(&a, "v", &[], "pro").await;
    for _ in 0..5 {
        let called = b.call("v", &theirs, "add", add(2, 2)).await;
        assert_eq!(called.status, StatusCode::OK, "{}", called.text);
    }
    set_policies(
        &a,
        json!({"quotas": [{"name": "free-daily", "when": "user.plan == \"free\"", "limit": 5,
                           "window": "day"}], "rules": []}),
    )
    .await;
    eventually("the other instance applies the higher limit", || async {
        b.call("u", &server, "add", add(1, 2)).await.status == StatusCode::OK
    })
    .await;
    assert_eq!(
        a.call("u", &server, "add", add(1, 2)).await.code(),
        "QUOTA_EXCEEDED"
    );
    b.stop().await;
    a.stop().await;
}

#[tokio::test]
async fn a_shared_quota_is_one_count_for_everyone_it_applies_to_and_a_bad_one_is_refused() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(crate::upstreams::fixture_preset())
        .await;
    let mut servers = Vec::new();
    for user in ["s1", "s2"] {
        set_attributes(&app, user, &["support"], "team").await;
        servers.push(
            app.create_server_ok(user, json!({"name": "fx", "preset": "fixture"}))
                .await,
        );
    }
    let bad = app
        .admin(
            Method::PUT,
            "/admin/policies",
            Some(json!({"rules": [], "quotas": [
                {"name": "by-argument", "when": "arguments.a > 1", "limit": 1, "window": "minute"}
            ]})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
    assert!(
        bad.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("quotas[0].when ('by-argument'): a quota cannot read arguments"),
        "{}",
        bad.text
    );
    let broken = app
        .admin(
            Method::PUT,
            "/admin/policies",
            Some(json!({"quotas": [{"name": "q", "when": "user.plan ==", "limit": 1, "window": "day"}]})),
        )
        .await;
    assert!(
        broken.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("quotas[0].when ('q'): line 1, column"),
        "{}",
        broken.text
    );
    set_policies(
        &app,
        json!({"quotas": [{"name": "support-pool", "per": "shared", "limit": 3, "window": "hour",
                           "when": "\"support\" in user.groups && tool.name == \"add\""}]}),
    )
    .await;
    for (user, server) in [
        ("s1", &servers[0]),
        ("s2", &servers[1]),
        ("s1", &servers[0]),
    ] {
        let called = app.call(user, server, "add", add(1, 1)).await;
        assert_eq!(called.status, StatusCode::OK, "{}", called.text);
    }
    let refused = app.call("s2", &servers[1], "add", add(1, 1)).await;
    assert_eq!(refused.code(), "QUOTA_EXCEEDED", "{}", refused.text);
    // Another tool is not counted by it.
    let echoed = app
        .call("s2", &servers[1], "echo", json!({"text": "free"}))
        .await;
    assert_eq!(echoed.status, StatusCode::OK, "{}", echoed.text);
    let used = app.admin(Method::GET, "/admin/users/s2/quotas", None).await;
    assert_eq!(used.body["quotas"][0]["used"], 3, "{}", used.text);

    // The test form says which quotas would count a call.
    let tested = app
        .admin(
            Method::POST,
            "/admin/policies/test",
            Some(json!({"call": {"user": {"groups": ["support"]}, "tool": {"name": "add"}}})),
        )
        .await;
    assert_eq!(
        tested.body["quotas"],
        json!(["support-pool"]),
        "{}",
        tested.text
    );
}

#[tokio::test]
async fn a_redact_rule_keeps_named_fields_out_of_the_audit_log_and_the_call_runs() {
    let app = spawn_pool_app().await;
    let server = app.fixture_for_a1(&["echo"]).await;
    set_policies(
        &app,
        json!({"rules": [
            {"name": "hide-pins", "action": "redact", "when": "tool.name == \"echo\"",
             "fields": ["arguments.text", "result.pin"]},
            {"name": "after-redact", "action": "deny", "when": "tool.name == \"add\""}
        ]}),
    )
    .await;
    let text = r#"{"pin":"4711-zz-hidden","note":"stays-visible"}"#;
    let echoed = app.call("u", &server, "echo", json!({"text": text})).await;
    assert_eq!(echoed.status, StatusCode::OK, "{}", echoed.text);
    assert_eq!(
        echoed.body["content"][0]["text"], text,
        "the caller's answer is whole"
    );
    // Evaluation goes on past a redact rule: the deny after it still decides.
    assert_eq!(
        app.call("u", &server, "add", add(1, 2)).await.code(),
        "POLICY_DENIED"
    );
    let page = app
        .admin(Method::GET, "/admin/audit?userId=u&tool=echo", None)
        .await;
    let id = page.body["entries"][0]["id"].as_str().unwrap().to_owned();
    let row = app
        .admin(Method::GET, &format!("/admin/audit/{id}"), None)
        .await;
    let (arguments, result) = (
        row.body["arguments"].as_str().unwrap(),
        row.body["result"].as_str().unwrap(),
    );
    assert!(
        !arguments.contains("4711") && arguments.contains("[redacted]"),
        "{arguments}"
    );
    assert!(
        !result.contains("4711") && result.contains("stays-visible"),
        "{result}"
    );
    let refused = app
        .admin(
            Method::PUT,
            "/admin/policies",
            Some(
                json!({"rules": [{"name": "r", "action": "redact", "when": "true",
                                   "fields": ["password"]}]}),
            ),
        )
        .await;
    assert_eq!(refused.code(), "VALIDATION_ERROR", "{}", refused.text);
}

/// The team server at the OAuth fixture, defined by the operator for `support`.
async fn team_server(app: &TestApp, fixture: &HttpUpstream) -> String {
    let created = app
        .admin(
            Method::POST,
            "/admin/teams/support/servers",
            Some(json!({"name": "crm", "type": "streamableHttp",
                        "baseUrl": format!("{}/mcp", fixture.base)})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["team"], "support", "{}", created.text);
    created.body["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_team_server_is_used_by_each_member_with_their_own_tokens_and_only_by_members() {
    let app = spawn_pool_app().await;
    let fixture = HttpUpstream::fixture_with(&["--oauth"]).await;
    set_attributes(&app, "alice", &["support"], "pro").await;
    set_attributes(&app, "bob", &["support", "sales"], "pro").await;
    set_attributes(&app, "carol", &["sales"], "pro").await;
    let server = team_server(&app, &fixture).await;

    // A team's owner is not a user in the operator's list.
    let users = app.admin(Method::GET, "/admin/users", None).await;
    assert!(!users.text.contains("*team:"), "{}", users.text);
    // Members see it among their servers; others do not.
    for (user, sees) in [("alice", true), ("bob", true), ("carol", false)] {
        let listed = app.user(user, Method::GET, "/api/mcp-servers", None).await;
        let found = listed.body["servers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == server.as_str() && s["team"] == "support");
        assert_eq!(found, sees, "{user}: {}", listed.text);
    }

    // Each member authorizes for themself: alice's tokens are not bob's.
    let refused = app.call("alice", &server, "add", add(1, 2)).await;
    assert_eq!(refused.code(), "MCP_AUTH_REQUIRED", "{}", refused.text);
    crate::oauth::authorize(&app, "alice", &server).await;
    let called = app.call("alice", &server, "add", add(1, 2)).await;
    assert_eq!(called.status, StatusCode::OK, "{}", called.text);
    let bobs = app.call("bob", &server, "add", add(1, 2)).await;
    assert_eq!(
        bobs.code(),
        "MCP_AUTH_REQUIRED",
        "bob has no tokens yet: {}",
        bobs.text
    );
    crate::oauth::authorize(&app, "bob", &server).await;
    assert_eq!(
        app.call("bob", &server, "add", add(2, 2)).await.status,
        StatusCode::OK
    );
    let stats: Value = reqwest::get(format!("{}/oauth-fixture/stats", fixture.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["token_grants"], 2, "{stats}");
    // Two connections, one per member.
    let users: std::collections::BTreeSet<String> = app
        .connections()
        .await
        .into_iter()
        .filter(|c| c["serverId"] == server.as_str())
        .map(|c| c["userId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        users,
        ["alice", "bob"].map(String::from).into_iter().collect()
    );

    // Not a member: neither call, nor authorize, nor bind.
    let foreign = app.call("carol", &server, "add", add(1, 2)).await;
    assert_eq!(foreign.code(), "MCP_SERVER_NOT_FOUND", "{}", foreign.text);
    let authorize = crate::oauth::start(&app, "carol", &server).await;
    assert_eq!(
        authorize.code(),
        "MCP_SERVER_NOT_FOUND",
        "{}",
        authorize.text
    );
    let bind = app
        .user(
            "carol",
            Method::PUT,
            "/api/assistants/a1/mcp-servers",
            Some(json!({"serverIds": [server]})),
        )
        .await;
    assert_eq!(bind.code(), "MCP_SERVER_NOT_FOUND", "{}", bind.text);
    // A member reads it (secrets masked); a non-member does not find it.
    let read = app
        .user(
            "bob",
            Method::GET,
            &format!("/api/mcp-servers/{server}"),
            None,
        )
        .await;
    assert_eq!(read.body["team"], "support", "{}", read.text);
    let hidden = app
        .user(
            "carol",
            Method::GET,
            &format!("/api/mcp-servers/{server}"),
            None,
        )
        .await;
    assert_eq!(hidden.code(), "MCP_SERVER_NOT_FOUND", "{}", hidden.text);
    // A member binds it and a model's call runs on their own connection.
    app.bind_ok("bob", "a1", [&server]).await;
    // Nor may a member change it.
    let changed = app
        .user(
            "bob",
            Method::PUT,
            &format!("/api/mcp-servers/{server}"),
            Some(json!({"name": "mine"})),
        )
        .await;
    assert_eq!(changed.code(), "MCP_SERVER_NOT_FOUND", "{}", changed.text);

    // Rules read the team; a member who leaves it stops using it (live connection or not).
    let tested = app
        .admin(
            Method::POST,
            "/admin/policies/test",
            Some(
                json!({"rules": [{"name": "crm-reads", "when": "server.team == \"support\"",
                                   "action": "deny"}],
                        "call": {"server": {"team": "support"}, "tool": {"name": "add"}}}),
            ),
        )
        .await;
    assert_eq!(tested.body["rule"], "crm-reads", "{}", tested.text);
    set_attributes(&app, "bob", &["sales"], "pro").await;
    eventually("bob's membership ends within seconds", || async {
        app.call("bob", &server, "add", add(1, 1)).await.code() == "MCP_SERVER_NOT_FOUND"
    })
    .await;
    assert_eq!(
        app.call("alice", &server, "add", add(1, 1)).await.status,
        StatusCode::OK
    );

    // The operator deletes it: every member's connection stops.
    let deleted = app
        .admin(
            Method::DELETE,
            &format!("/admin/teams/support/servers/{server}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    assert!(
        app.connections()
            .await
            .iter()
            .all(|c| c["serverId"] != server.as_str()),
        "every member's connection stopped"
    );
    assert_eq!(
        app.call("alice", &server, "add", add(1, 1)).await.code(),
        "MCP_SERVER_NOT_FOUND"
    );
    let bad = app
        .admin(Method::GET, "/admin/teams/a%20b/servers", None)
        .await;
    assert_eq!(bad.code(), "VALIDATION_ERROR", "{}", bad.text);
}

#[tokio::test]
async fn rules_and_quotas_hold_on_a_xiaozhi_bridge_by_its_path() {
    use crate::xiaozhi::{accept, initialize, request};
    let app = crate::helpers::spawn_pool_app_with(|_| {}).await;
    app.create_preset_ok(crate::upstreams::fixture_preset())
        .await;
    let fx = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "fixture", "autoApproveTools": ["echo", "add"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&fx]).await;
    set_policies(
        &app,
        json!({"rules": [{"name": "no-adding-by-voice", "action": "deny",
                          "when": "path == \"xiaozhi\" && tool.name == \"add\""}],
               "quotas": [{"name": "voice", "when": "path == \"xiaozhi\"", "limit": 1,
                           "window": "day"}]}),
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let put = app
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a1/xiaozhi",
            Some(json!({"endpoint": format!("ws://127.0.0.1:{port}/mcp/?token=t")})),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    let mut socket = accept(&listener).await;
    initialize(&mut socket).await;
    let tools = request(&mut socket, 2, "tools/list", json!({})).await;
    let names = tools["result"]["tools"].to_string();
    assert!(
        names.contains("fx.echo") && !names.contains("fx.add"),
        "{names}"
    );
    let refused = request(
        &mut socket,
        3,
        "tools/call",
        json!({"name": "fx.add", "arguments": {"a": 1, "b": 2}}),
    )
    .await;
    assert!(
        refused.to_string().contains("no-adding-by-voice") || refused["error"].is_object(),
        "{refused}"
    );
    let first = request(
        &mut socket,
        4,
        "tools/call",
        json!({"name": "fx.echo", "arguments": {"text": "one"}}),
    )
    .await;
    assert_eq!(first["result"]["content"][0]["text"], "one", "{first}");
    let second = request(
        &mut socket,
        5,
        "tools/call",
        json!({"name": "fx.echo", "arguments": {"text": "two"}}),
    )
    .await;
    assert_eq!(second["result"]["isError"], true, "{second}");
    assert!(second.to_string().contains("QUOTA_EXCEEDED"), "{second}");
    // The same user over REST is not counted by the voice quota nor refused by its rule.
    let rest = app.call("u", &fx, "add", add(1, 2)).await;
    assert_eq!(rest.status, StatusCode::OK, "{}", rest.text);
}

#[tokio::test]
async fn through_the_gateway_require_approval_parks_an_auto_approved_call_and_redact_holds() {
    let app = spawn_pool_app().await;
    app.fixture_for_a1(&["add", "echo"]).await;
    set_policies(
        &app,
        json!({"rules": [
            {"name": "hide-text", "action": "redact", "when": "true", "fields": ["arguments.text"]},
            {"name": "adding-asks", "action": "require_approval", "when": "tool.name == \"add\""}
        ]}),
    )
    .await;
    let token = app.gateway_token("u", "a1").await;
    let mut events = crate::gateway::user_events(&app, "u").await;
    let client = crate::gateway::connect(&app, "a1", &token).await;
    let peer = client.peer().clone();
    let parked = tokio::spawn(async move {
        let mut params = CallToolRequestParams::new("fx__add");
        params.arguments = add(1, 2).as_object().cloned();
        peer.call_tool(params).await
    });
    let pending = crate::gateway::next_pending(&mut events).await;
    assert!(!parked.is_finished(), "auto-approved, but the rule asks");
    app.confirm_ok(
        pending["messageId"].as_str().unwrap(),
        pending["toolCall"]["id"].as_str().unwrap(),
        true,
    )
    .await;
    let result = parked.await.unwrap().unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    // Redaction on the gateway's calls too.
    let mut params = CallToolRequestParams::new("fx__echo");
    params.arguments = json!({"text": "gateway-secret-42"}).as_object().cloned();
    let echoed = client.call_tool(params).await.unwrap();
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    client.cancel().await.ok();
    let page = app
        .admin(
            Method::GET,
            "/admin/audit?userId=u&tool=echo&via=gateway",
            None,
        )
        .await;
    let id = page.body["entries"][0]["id"].as_str().unwrap().to_owned();
    let row = app
        .admin(Method::GET, &format!("/admin/audit/{id}"), None)
        .await;
    let arguments = row.body["arguments"].as_str().unwrap();
    assert!(
        !arguments.contains("gateway-secret-42") && arguments.contains("[redacted]"),
        "{arguments}"
    );
}

#[tokio::test]
async fn a_rule_on_an_argument_the_call_lacks_decides_as_written() {
    // Calls without the argument are decided from the call's base, not evaluated one by
    // one: `!has(...)` must still apply, and a present argument must still be read.
    let app = spawn_pool_app().await;
    let server = app.fixture_for_a1(&["add", "echo"]).await;
    set_policies(
        &app,
        json!({"rules": [
            {"name": "add-needs-c", "action": "deny", "when": "tool.name == \"add\" && !has(arguments.c)"},
            {"name": "no-big-a", "action": "deny", "when": "has(arguments.a) && arguments.a > 100"}
        ]}),
    )
    .await;
    let refused = app.call("u", &server, "add", add(1, 2)).await;
    assert_eq!(refused.code(), "POLICY_DENIED", "{}", refused.text);
    assert!(refused.text.contains("add-needs-c"), "{}", refused.text);
    let echoed = app.call("u", &server, "echo", json!({"text": "x"})).await;
    assert_eq!(echoed.status, StatusCode::OK, "{}", echoed.text);
    set_policies(
        &app,
        json!({"rules": [
            {"name": "no-big-a", "action": "deny", "when": "has(arguments.a) && arguments.a > 100"}
        ]}),
    )
    .await;
    assert_eq!(
        app.call("u", &server, "add", add(1, 2)).await.status,
        StatusCode::OK
    );
    let big = app.call("u", &server, "add", add(101, 2)).await;
    assert_eq!(big.code(), "POLICY_DENIED", "{}", big.text);
}
