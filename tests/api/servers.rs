use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{remote_server, spawn_app, spawn_app_with};

#[tokio::test]
async fn create_read_list_update_delete_round_trip() {
    let app = spawn_app().await;
    let created = app
        .create_server(
            "alice",
            json!({
                "name": "search",
                "baseUrl": "https://93.184.216.34/mcp",
                "headers": {"X-Api-Key": "k-123"},
                "timeoutSecs": 20,
                "disabledTools": ["delete_all"],
                "autoApproveTools": ["search", "search"]
            }),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let id = created.body["id"].as_str().unwrap().to_owned();
    assert_eq!(created.body["type"], "streamableHttp");
    assert_eq!(created.body["isActive"], true);
    assert_eq!(created.body["timeoutSecs"], 20);
    assert_eq!(created.body["disabledTools"], json!(["delete_all"]));
    assert_eq!(
        created.body["autoApproveTools"],
        json!(["search"]),
        "duplicates are dropped"
    );

    let read = app
        .user(
            "alice",
            Method::GET,
            &format!("/api/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body, created.body);

    let list = app
        .user("alice", Method::GET, "/api/mcp-servers", None)
        .await;
    assert_eq!(list.body["servers"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["servers"][0]["id"], id.as_str());

    let updated = app
        .user(
            "alice",
            Method::PUT,
            &format!("/api/mcp-servers/{id}"),
            Some(json!({"name": "web search", "isActive": false, "autoApproveTools": []})),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.text);
    assert_eq!(updated.body["name"], "web search");
    assert_eq!(updated.body["isActive"], false);
    assert_eq!(updated.body["autoApproveTools"], json!([]));
    assert_eq!(updated.body["timeoutSecs"], 20, "fields not sent are kept");
    assert_eq!(updated.body["headers"], json!({"X-Api-Key": "********"}));
    assert_ne!(updated.body["updatedAt"], created.body["updatedAt"]);

    let deleted = app
        .user(
            "alice",
            Method::DELETE,
            &format!("/api/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = app
        .user(
            "alice",
            Method::GET,
            &format!("/api/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.code(), "MCP_SERVER_NOT_FOUND");
    let again = app
        .user(
            "alice",
            Method::DELETE,
            &format!("/api/mcp-servers/{id}"),
            None,
        )
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn transport_is_inferred_from_the_url_when_omitted() {
    let app = spawn_app().await;
    let http = app
        .create_server(
            "u",
            json!({"name": "a", "baseUrl": "https://93.184.216.34/api/mcp"}),
        )
        .await;
    assert_eq!(http.body["type"], "streamableHttp");
    let sse = app
        .create_server(
            "u",
            json!({"name": "b", "url": "https://93.184.216.34/sse"}),
        )
        .await;
    assert_eq!(sse.body["type"], "sse");
    let explicit = app
        .create_server(
            "u",
            json!({"name": "c", "type": "sse", "baseUrl": "https://93.184.216.34/mcp"}),
        )
        .await;
    assert_eq!(explicit.body["type"], "sse");
}

#[tokio::test]
async fn a_duplicate_name_for_the_same_user_is_a_conflict() {
    let app = spawn_app().await;
    app.create_server_ok("alice", remote_server("files")).await;
    let dup = app.create_server("alice", remote_server("files")).await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    assert_eq!(dup.code(), "CONFLICT");
    assert!(
        dup.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("files")
    );
    // Another user may use the same name.
    app.create_server_ok("bob", remote_server("files")).await;
    // Renaming onto an existing name is a conflict too.
    let other = app.create_server_ok("alice", remote_server("other")).await;
    let rename = app
        .user(
            "alice",
            Method::PUT,
            &format!("/api/mcp-servers/{other}"),
            Some(json!({"name": "files"})),
        )
        .await;
    assert_eq!(rename.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn the_number_of_servers_per_user_is_limited() {
    let app = spawn_app_with(|s| s.limits.max_servers_per_user = 2).await;
    app.create_server_ok("alice", remote_server("one")).await;
    app.create_server_ok("alice", remote_server("two")).await;
    let third = app.create_server("alice", remote_server("three")).await;
    assert_eq!(third.status, StatusCode::CONFLICT);
    assert_eq!(third.code(), "LIMIT_REACHED");
    app.create_server_ok("bob", remote_server("one")).await;
}

#[tokio::test]
async fn switching_a_remote_server_to_another_url_kind_keeps_its_headers() {
    let app = spawn_app().await;
    let id = app
        .create_server_ok(
            "u",
            json!({"name": "s", "baseUrl": "https://93.184.216.34/sse", "headers": {"Authorization": "Bearer a"}}),
        )
        .await;
    let changed = app
        .user(
            "u",
            Method::PUT,
            &format!("/api/mcp-servers/{id}"),
            Some(json!({"type": "streamableHttp", "baseUrl": "https://93.184.216.34/mcp"})),
        )
        .await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.text);
    assert_eq!(changed.body["type"], "streamableHttp");
    assert_eq!(
        changed.body["headers"],
        json!({"Authorization": "********"})
    );
}
