use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn keys_are_shown_once_and_listed_by_prefix() {
    let app = spawn_app().await;
    let created = app
        .admin(
            Method::POST,
            "/admin/keys",
            Some(json!({"name": "ops", "role": "admin"})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let secret = created.body["key"].as_str().unwrap();
    assert!(secret.starts_with(created.body["prefix"].as_str().unwrap()));

    let list = app.admin(Method::GET, "/admin/keys", None).await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(!list.text.contains(secret), "the list never shows a key");
    let names: Vec<&str> = list.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"ops") && names.contains(&"backend"),
        "{names:?}"
    );

    let stored = app.raw_column("api_keys", "key_hash").await;
    assert!(stored.iter().all(|h| h.len() == 64 && !h.contains(secret)));

    let bad_role = app
        .admin(
            Method::POST,
            "/admin/keys",
            Some(json!({"name": "x", "role": "root"})),
        )
        .await;
    assert_eq!(bad_role.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn the_last_admin_key_cannot_be_revoked() {
    let app = spawn_app().await;
    let list = app.admin(Method::GET, "/admin/keys", None).await;
    let admin_id = list.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["role"] == "admin")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = app
        .admin(Method::DELETE, &format!("/admin/keys/{admin_id}"), None)
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);
    let unknown = app
        .admin(
            Method::DELETE,
            &format!("/admin/keys/{}", uuid::Uuid::new_v4()),
            None,
        )
        .await;
    assert_eq!(unknown.code(), "API_KEY_NOT_FOUND");
}
