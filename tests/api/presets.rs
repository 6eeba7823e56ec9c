use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;

fn memory_preset() -> serde_json::Value {
    json!({
        "name": "memory",
        "description": "Knowledge graph memory",
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-memory"],
        "env": {"SHARED_TOKEN": "admin-secret"},
        "envSlots": [{"name": "MEMORY_FILE_PATH", "description": "where to keep the graph"}]
    })
}

#[tokio::test]
async fn admins_manage_presets_and_users_can_browse_them() {
    let app = spawn_app().await;
    let created = app
        .admin(Method::POST, "/admin/presets", Some(memory_preset()))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["env"], json!({"SHARED_TOKEN": "********"}));
    assert!(!created.text.contains("admin-secret"));

    let dup = app
        .admin(Method::POST, "/admin/presets", Some(memory_preset()))
        .await;
    assert_eq!(dup.status, StatusCode::CONFLICT);

    let mut changed = memory_preset();
    changed["description"] = json!("changed");
    changed["env"] = json!({"SHARED_TOKEN": "********"});
    let replaced = app
        .admin(Method::PUT, "/admin/presets/memory", Some(changed))
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.text);
    assert_eq!(replaced.body["description"], "changed");
    assert_eq!(replaced.body["env"], json!({"SHARED_TOKEN": "********"}));

    let mut renamed = memory_preset();
    renamed["name"] = json!("other");
    let rename = app
        .admin(Method::PUT, "/admin/presets/memory", Some(renamed))
        .await;
    assert_eq!(rename.status, StatusCode::UNPROCESSABLE_ENTITY);

    let browse = app.user("u", Method::GET, "/api/presets", None).await;
    assert_eq!(browse.status, StatusCode::OK);
    assert_eq!(browse.body["presets"][0]["name"], "memory");
    assert!(!browse.text.contains("admin-secret"));

    let read = app.admin(Method::GET, "/admin/presets/memory", None).await;
    assert_eq!(read.body["description"], "changed");
    let missing = app.admin(Method::GET, "/admin/presets/nope", None).await;
    assert_eq!(missing.code(), "PRESET_NOT_FOUND");
}

#[tokio::test]
async fn a_preset_in_use_cannot_be_deleted() {
    let app = spawn_app().await;
    app.create_preset_ok(memory_preset()).await;
    let id = app
        .create_server_ok("u", json!({"name": "mem", "preset": "memory"}))
        .await;
    let refused = app
        .admin(Method::DELETE, "/admin/presets/memory", None)
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 MCP server")
    );
    app.user("u", Method::DELETE, &format!("/api/mcp-servers/{id}"), None)
        .await;
    let deleted = app
        .admin(Method::DELETE, "/admin/presets/memory", None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let again = app
        .admin(Method::DELETE, "/admin/presets/memory", None)
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn invalid_presets_are_refused() {
    let app = spawn_app().await;
    let cases = [
        json!({"name": "Bad Name", "command": "x"}),
        json!({"name": "ok", "command": ""}),
        json!({"name": "ok", "command": "x", "args": ["{undeclared}"]}),
        json!({"name": "ok", "command": "x", "argSlots": [{"name": "a", "pattern": "("}]}),
        json!({"name": "ok", "command": "x", "argSlots": [{"name": "a"}, {"name": "a"}]}),
        json!({"name": "ok", "command": "x", "env": {"A": "1"}, "envSlots": [{"name": "A"}]}),
        json!({"name": "ok", "command": "x", "argSlots": [{"name": "a", "unknownField": 1}]}),
        json!({"command": "x"}),
    ];
    for body in cases {
        let reply = app
            .admin(Method::POST, "/admin/presets", Some(body.clone()))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            reply.text
        );
    }
}
