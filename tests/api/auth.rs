use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{ADMIN_KEY, spawn_app};

#[tokio::test]
async fn missing_or_wrong_keys_get_401_json_with_a_bearer_challenge() {
    let app = spawn_app().await;
    for key in [None, Some("mcpp_not_a_real_key")] {
        let reply = app
            .send(Method::GET, "/api/mcp-servers", key, Some("alice"), None)
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.text);
        assert_eq!(reply.code(), "UNAUTHORIZED");
        assert_eq!(reply.headers["www-authenticate"], "Bearer");
    }
    let basic = app
        .send_raw(
            app.request(Method::GET, "/api/mcp-servers")
                .header("Authorization", format!("Basic {}", app.service_key))
                .header("X-User-Id", "alice"),
        )
        .await;
    assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
    let admin_routes = app
        .send(Method::GET, "/admin/presets", None, None, None)
        .await;
    assert_eq!(admin_routes.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_service_key_cannot_reach_admin_routes() {
    let app = spawn_app().await;
    let key = app.service_key.clone();
    for (method, path) in [
        (Method::GET, "/admin/presets"),
        (Method::GET, "/admin/keys"),
    ] {
        let reply = app.send(method, path, Some(&key), None, None).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(reply.code(), "FORBIDDEN");
    }
    let create = app
        .send(
            Method::POST,
            "/admin/keys",
            Some(&key),
            None,
            Some(json!({"name": "x", "role": "admin"})),
        )
        .await;
    assert_eq!(create.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn user_routes_need_a_valid_user_id() {
    let app = spawn_app().await;
    let key = app.service_key.clone();
    let missing = app
        .send(Method::GET, "/api/mcp-servers", Some(&key), None, None)
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.code(), "MISSING_USER_ID");
    for bad in ["a b", "../etc", &"x".repeat(200)] {
        let reply = app
            .send(Method::GET, "/api/mcp-servers", Some(&key), Some(bad), None)
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(reply.code(), "INVALID_USER_ID");
    }
}

#[tokio::test]
async fn an_admin_key_may_act_for_a_user() {
    let app = spawn_app().await;
    let reply = app
        .send(
            Method::GET,
            "/api/mcp-servers",
            Some(ADMIN_KEY),
            Some("alice"),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["servers"], json!([]));
}

#[tokio::test]
async fn a_revoked_key_stops_working_at_once() {
    let app = spawn_app().await;
    let created = app
        .admin(
            Method::POST,
            "/admin/keys",
            Some(json!({"name": "temp", "role": "service"})),
        )
        .await;
    let (id, key) = (
        created.body["id"].as_str().unwrap(),
        created.body["key"].as_str().unwrap(),
    );
    let before = app
        .send(Method::GET, "/api/mcp-servers", Some(key), Some("u"), None)
        .await;
    assert_eq!(before.status, StatusCode::OK);
    let revoked = app
        .admin(Method::DELETE, &format!("/admin/keys/{id}"), None)
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.text);
    assert!(revoked.body["revokedAt"].is_string());
    let after = app
        .send(Method::GET, "/api/mcp-servers", Some(key), Some("u"), None)
        .await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
}
