//! What an operator browses (issue 40): every user by part of their id, every server by
//! name, user or URL with its live connection and that connection's recent history, and
//! every call waiting for a decision across users.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{TestApp, spawn_app_with, spawn_pool_app};
use crate::upstreams::{eventually, fixture_preset};

fn ids(reply: &Value, list: &str, field: &str) -> Vec<String> {
    reply[list]
        .as_array()
        .unwrap_or_else(|| panic!("{list}: {reply}"))
        .iter()
        .map(|row| row[field].as_str().unwrap().to_owned())
        .collect()
}

/// `user`'s fixture server `name` bound to their assistant `a1` (`echo` auto-approved).
async fn fixture_of(app: &TestApp, user: &str, name: &str) -> String {
    let server = app
        .create_server_ok(
            user,
            json!({"name": name, "preset": "fixture", "autoApproveTools": ["echo"]}),
        )
        .await;
    app.bind_ok(user, "a1", [&server]).await;
    server
}

async fn park_add(app: &TestApp, user: &str, server_name: &str) -> String {
    let message = Uuid::new_v4().to_string();
    let parked = app
        .user(
            user,
            Method::POST,
            &format!("/api/messages/{message}/tool-calls"),
            Some(json!({"assistantId": "a1", "calls": [
                {"id": "c1", "name": format!("mcp__{server_name}__add"), "arguments": {"a": 2, "b": 3}}]})),
        )
        .await;
    assert_eq!(parked.status, StatusCode::ACCEPTED, "{}", parked.text);
    message
}

#[tokio::test]
async fn users_are_found_by_part_of_their_id_and_paged_with_their_counts() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    for user in ["alice-1", "Alice-2", "bob"] {
        fixture_of(&app, user, "fx").await;
    }
    app.create_server_ok("bob", json!({"name": "more", "preset": "fixture"}))
        .await;
    park_add(&app, "bob", "fx").await;

    let all = app.admin(Method::GET, "/admin/users", None).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(
        ids(&all.body, "users", "userId"),
        ["Alice-2", "alice-1", "bob"]
    );
    let bob = &all.body["users"][2];
    assert_eq!(
        (bob["servers"].as_u64(), bob["openCalls"].as_u64()),
        (Some(2), Some(1)),
        "{bob}"
    );

    let found = app
        .admin(Method::GET, "/admin/users?search=ALICE&pageSize=1", None)
        .await;
    assert_eq!(found.body["total"], 2, "{}", found.text);
    assert_eq!(ids(&found.body, "users", "userId"), ["Alice-2"]);
    let next = app
        .admin(
            Method::GET,
            "/admin/users?search=alice&pageSize=1&page=1",
            None,
        )
        .await;
    assert_eq!(ids(&next.body, "users", "userId"), ["alice-1"]);
    // Wildcards are searched for as themselves.
    let none = app
        .admin(Method::GET, "/admin/users?search=%25", None)
        .await;
    assert_eq!(none.body["total"], 0, "{}", none.text);
    let none = app.admin(Method::GET, "/admin/users?search=_", None).await;
    assert_eq!(none.body["total"], 0, "{}", none.text);

    for query in [
        "search=".to_owned() + &"x".repeat(129),
        "pageSize=0".into(),
        "pageSize=201".into(),
    ] {
        let refused = app
            .admin(Method::GET, &format!("/admin/users?{query}"), None)
            .await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            refused.text
        );
        assert_eq!(refused.code(), "VALIDATION_ERROR");
    }
    let unknown = app.admin(Method::GET, "/admin/users?sort=name", None).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{}", unknown.text);
    let as_service = app
        .send(
            Method::GET,
            "/admin/users",
            Some(&app.service_key),
            None,
            None,
        )
        .await;
    assert_eq!(as_service.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn servers_of_every_user_are_found_by_name_user_or_url_with_their_connection() {
    let app = spawn_app_with(|s| s.security.allow_loopback_urls = true).await;
    app.create_preset_ok(fixture_preset()).await;
    let fx = app
        .create_server_ok("u1", json!({"name": "fx", "preset": "fixture"}))
        .await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = app
        .create_server_ok(
            "u2",
            json!({"name": "weather", "type": "streamableHttp",
                   "baseUrl": format!("http://127.0.0.1:{port}/mcp?key=hidden-value")}),
        )
        .await;

    let all = app.admin(Method::GET, "/admin/servers", None).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(ids(&all.body, "servers", "id"), [fx.clone(), gone.clone()]);
    assert!(
        !all.text.contains("hidden-value"),
        "secrets masked: {}",
        all.text
    );
    for (search, expected) in [
        ("WEATH", vec![gone.clone()]),
        ("u1", vec![fx.clone()]),
        (&format!("{port}/mcp") as &str, vec![gone.clone()]),
        ("nothing-like-it", vec![]),
    ] {
        let found = app
            .admin(
                Method::GET,
                &format!("/admin/servers?search={search}"),
                None,
            )
            .await;
        assert_eq!(
            ids(&found.body, "servers", "id"),
            expected,
            "{search}: {}",
            found.text
        );
    }

    // A connection that cannot be made says why, and keeps the history of its states.
    let failed = app.connect("u2", &gone).await;
    assert_eq!(failed.status, StatusCode::BAD_GATEWAY, "{}", failed.text);
    let listed = || async {
        let found = app
            .admin(Method::GET, "/admin/servers?search=weather", None)
            .await;
        found.body["servers"][0]["connection"].clone()
    };
    eventually("the failed connection is listed", || async {
        listed().await["state"] == "error"
    })
    .await;
    let connection = listed().await;
    let history = connection["history"].as_array().unwrap();
    let states: Vec<&str> = history
        .iter()
        .map(|h| h["state"].as_str().unwrap())
        .collect();
    assert!(
        states.contains(&"connecting") && states.contains(&"error"),
        "{connection}"
    );
    let cause = history
        .iter()
        .find(|h| h["state"] == "error")
        .and_then(|h| h["cause"].as_str())
        .unwrap();
    assert!(cause.to_lowercase().contains("refused"), "{cause}");
    assert!(!cause.contains("::"), "{cause}");
    assert!(!cause.contains("hidden-value"), "{cause}");

    // Found by the state of its connection.
    let errored = app
        .admin(Method::GET, "/admin/servers?state=error", None)
        .await;
    assert_eq!(
        ids(&errored.body, "servers", "id"),
        std::slice::from_ref(&gone),
        "{}",
        errored.text
    );
    let bad = app
        .admin(Method::GET, "/admin/servers?state=sleepy", None)
        .await;
    assert_eq!(bad.code(), "VALIDATION_ERROR", "{}", bad.text);

    // The failed try is on the record, with its cause.
    let audit = app
        .admin(
            Method::GET,
            "/admin/audit?userId=u2&outcome=connect_failed",
            None,
        )
        .await;
    assert_eq!(audit.body["total"], 1, "{}", audit.text);
    let row = &audit.body["entries"][0];
    assert_eq!(row["serverName"], "weather", "{row}");
    assert_eq!(row["errorCode"], "MCP_CONNECTION_ERROR", "{row}");
    assert!(says_refused(&row["errorMessage"]), "{row}");
}

fn says_refused(message: &Value) -> bool {
    message
        .as_str()
        .is_some_and(|m| m.to_lowercase().contains("refused"))
}

#[tokio::test]
async fn waiting_calls_of_every_user_are_listed_oldest_first_until_decided() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    fixture_of(&app, "carol", "fx").await;
    fixture_of(&app, "dave", "fx").await;
    let first = park_add(&app, "carol", "fx").await;
    let second = park_add(&app, "dave", "fx").await;

    let queue = app.admin(Method::GET, "/admin/approvals", None).await;
    assert_eq!(queue.status, StatusCode::OK, "{}", queue.text);
    assert_eq!(
        ids(&queue.body, "calls", "messageId"),
        [first.clone(), second.clone()]
    );
    let oldest = &queue.body["calls"][0];
    assert_eq!(oldest["userId"], "carol");
    assert_eq!(oldest["toolCall"]["toolName"], "add");
    assert_eq!(oldest["toolCall"]["arguments"], json!({"a": 2, "b": 3}));

    // An operator approves dave's call as dave; it leaves the queue and runs.
    let approved = app
        .send(
            Method::POST,
            &format!("/api/messages/{second}/tool-confirm"),
            Some(crate::helpers::ADMIN_KEY),
            Some("dave"),
            Some(json!({"toolCallId": "c1", "approved": true})),
        )
        .await;
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.text);
    let queue = app.admin(Method::GET, "/admin/approvals", None).await;
    assert_eq!(ids(&queue.body, "calls", "messageId"), [first]);
    assert_eq!(queue.body["total"], 1);
    let refused = app
        .admin(Method::GET, "/admin/approvals?search=x", None)
        .await;
    assert_eq!(refused.code(), "VALIDATION_ERROR", "{}", refused.text);
}

#[tokio::test]
async fn an_admins_change_to_a_users_server_is_on_the_record_and_the_users_own_is_not() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let fx = fixture_of(&app, "erin", "fx").await;
    let by_user = app
        .user(
            "erin",
            Method::PUT,
            &format!("/api/mcp-servers/{fx}"),
            Some(json!({"autoApproveTools": []})),
        )
        .await;
    assert_eq!(by_user.status, StatusCode::OK, "{}", by_user.text);
    let by_admin = app
        .send(
            Method::PUT,
            &format!("/api/mcp-servers/{fx}"),
            Some(crate::helpers::ADMIN_KEY),
            Some("erin"),
            Some(json!({"disabledTools": ["add"]})),
        )
        .await;
    assert_eq!(by_admin.status, StatusCode::OK, "{}", by_admin.text);
    assert_eq!(by_admin.body["disabledTools"], json!(["add"]));
    let deleted = app
        .send(
            Method::DELETE,
            &format!("/api/mcp-servers/{fx}"),
            Some(crate::helpers::ADMIN_KEY),
            Some("erin"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);

    let rows = app
        .admin(Method::GET, "/admin/audit?userId=erin", None)
        .await;
    let outcomes: Vec<&str> = rows.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["server_deleted", "server_changed"],
        "{}",
        rows.text
    );
    let admin_key = crate::audit::key_id(&app, "admin").await;
    for row in rows.body["entries"].as_array().unwrap() {
        assert_eq!(row["decidedBy"], admin_key, "{row}");
        assert_eq!(row["serverName"], "fx", "{row}");
        assert_eq!(row["serverId"], fx.as_str(), "{row}");
    }
    let filtered = app
        .admin(Method::GET, "/admin/audit?outcome=server_changed", None)
        .await;
    assert_eq!(filtered.body["total"], 1, "{}", filtered.text);
}
