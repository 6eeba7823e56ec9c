//! ToolCallRecords stored one row each (`tool_calls`): the messages of older versions
//! (one JSON array per message) are moved into rows by the migration, and an approval
//! writes its own record's row only.

use chrono::{DateTime, Utc};
use migration::{Migrator, MigratorTrait};
use reqwest::Method;
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{TestApp, fresh_database_url, spawn_pool_app, spawn_pool_app_with};
use crate::upstreams::eventually;

/// Migrations before the one that moved the records into rows.
const BEFORE_ROWS: u32 = 6;

async fn message(app: &TestApp, id: &str) -> Value {
    app.user("u", Method::GET, &format!("/api/messages/{id}"), None)
        .await
        .body
}

/// A message of an older version: its records as one JSON array in `messages.tool_calls`.
async fn insert_old_message(
    db: &DatabaseConnection,
    id: Uuid,
    records: &Value,
    open_calls: i32,
    at: DateTime<Utc>,
) {
    let insert = Query::insert()
        .into_table("messages")
        .columns([
            "id",
            "conversation_id",
            "user_id",
            "role",
            "content",
            "tool_calls",
            "open_calls",
            "owner_instance",
            "created_at",
            "updated_at",
        ])
        .values_panic([
            id.into(),
            Option::<Uuid>::None.into(),
            "u".into(),
            "assistant".into(),
            "".into(),
            Expr::val(records.clone()),
            open_calls.into(),
            // The instance that wrote it is long gone.
            Some(Uuid::new_v4()).into(),
            at.into(),
            at.into(),
        ])
        .to_owned();
    db.execute(&insert).await.expect("old-shape message");
}

fn old_record(id: &str, status: &str, response: Value, is_error: bool) -> Value {
    json!({
        "id": id,
        "serverId": Uuid::new_v4(),
        "serverName": "fx",
        "toolName": "add",
        "displayName": "mcp__fx__add",
        "arguments": {"a": 1, "b": 2, "nested": {"list": [1, "two", null]}},
        "status": status,
        "response": response,
        "isError": is_error,
    })
}

#[tokio::test]
async fn messages_of_older_versions_keep_their_records_in_rows() {
    // A database at the schema before this change, holding messages as it stored them.
    let fresh = fresh_database_url().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let url = if fresh.is_empty() {
        format!("sqlite://{}/old.sqlite?mode=rwc", dir.path().display())
    } else {
        fresh
    };
    let db = Database::connect(&url).await.expect("connect");
    Migrator::up(&db, Some(BEFORE_ROWS))
        .await
        .expect("older schema");
    let at: DateTime<Utc> = "2026-11-20T10:00:00.123456Z".parse().unwrap();
    let settled_id = Uuid::new_v4();
    let settled = json!([
        old_record(
            "first",
            "done",
            json!([{"type": "text", "text": "3"}]),
            false
        ),
        old_record("second", "error", json!("the tool failed"), true),
    ]);
    insert_old_message(&db, settled_id, &settled, 0, at).await;
    let open_id = Uuid::new_v4();
    let open = json!([
        old_record("ran", "done", json!([{"type": "text", "text": "3"}]), false),
        old_record("parked", "pending", Value::Null, false),
    ]);
    insert_old_message(&db, open_id, &open, 1, at).await;
    let empty_id = Uuid::new_v4();
    insert_old_message(&db, empty_id, &json!([]), 0, at).await;
    db.close().await.ok();

    // The service migrates the rest at start-up.
    let app = spawn_pool_app_with(|s| s.database.url = url.clone().into()).await;
    app.fixture_for_a1(&[]).await;

    let stored = message(&app, &settled_id.to_string()).await;
    assert_eq!(stored["toolCalls"], settled, "the same records, in order");
    let updated: DateTime<Utc> = serde_json::from_value(stored["updatedAt"].clone()).unwrap();
    assert_eq!(
        updated, at,
        "moving the records changed nothing of the message"
    );
    assert_eq!(
        message(&app, &empty_id.to_string()).await["toolCalls"],
        json!([])
    );

    // The open call a previous process left is settled at start-up, like any other.
    let stored = message(&app, &open_id.to_string()).await;
    assert_eq!(stored["toolCalls"][0], open[0]);
    assert_eq!(stored["toolCalls"][1]["id"], "parked");
    assert_eq!(stored["toolCalls"][1]["status"], "cancelled");
    assert_eq!(stored["toolCalls"][1]["isError"], true);

    // A migrated message takes new calls after its old ones, and they run as usual.
    let reply = app
        .user(
            "u",
            Method::POST,
            &format!("/api/messages/{settled_id}/tool-calls"),
            Some(json!({"assistantId": "a1", "calls": [
                {"id": "third", "name": "mcp__fx__add", "arguments": {"a": 2, "b": 3}}
            ]})),
        )
        .await;
    assert_eq!(
        reply.body["toolCalls"][2]["status"], "pending",
        "{}",
        reply.text
    );
    app.confirm_ok(&settled_id.to_string(), "third", true).await;
    eventually("the approved call is done", || async {
        message(&app, &settled_id.to_string()).await["toolCalls"][2]["status"] == "done"
    })
    .await;
    let stored = message(&app, &settled_id.to_string()).await;
    let ids: Vec<&str> = stored["toolCalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["first", "second", "third"]);
    assert_eq!(stored["toolCalls"][0], settled[0]);
    assert_eq!(stored["toolCalls"][1], settled[1]);
    drop(dir);
}

/// Each record's row (status, `updated_at`) and the message row's `updated_at`, read
/// straight from the database.
async fn rows(app: &TestApp, message: &str) -> (Vec<(String, String, String)>, String) {
    let db = app.raw_db().await;
    let backend = db.get_database_backend();
    let id = Uuid::parse_str(message).unwrap();
    let select = Query::select()
        .columns(["id", "status", "updated_at"])
        .from("tool_calls")
        .and_where(Expr::col("message_id").eq(id))
        .order_by("position", sea_orm::Order::Asc)
        .to_owned();
    let records = db
        .query_all(&select)
        .await
        .expect("tool_calls rows")
        .iter()
        .map(|row| {
            let at: DateTime<Utc> = row.try_get("", "updated_at").unwrap();
            (
                row.try_get("", "id").unwrap(),
                row.try_get("", "status").unwrap(),
                at.to_rfc3339(),
            )
        })
        .collect();
    let select = Query::select()
        .column("updated_at")
        .from("messages")
        .and_where(Expr::col("id").eq(id))
        .to_owned();
    let row = db.query_one(&select).await.unwrap().expect("message row");
    let message_at: DateTime<Utc> = row.try_get("", "updated_at").unwrap();
    // The array column is gone: nothing can write the records as a whole any more.
    let old_column = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT tool_calls FROM messages",
        ))
        .await;
    assert!(old_column.is_err(), "messages.tool_calls no longer exists");
    db.close().await.ok();
    (records, message_at.to_rfc3339())
}

#[tokio::test]
async fn an_approval_writes_only_its_own_record() {
    let app = spawn_pool_app().await;
    app.fixture_for_a1(&[]).await;
    let id = Uuid::new_v4().to_string();
    let reply = app
        .user(
            "u",
            Method::POST,
            &format!("/api/messages/{id}/tool-calls"),
            Some(json!({"assistantId": "a1", "calls": [
                {"id": "c1", "name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}},
                {"id": "c2", "name": "mcp__fx__add", "arguments": {"a": 3, "b": 4}}
            ]})),
        )
        .await;
    assert_eq!(
        reply.body["toolCalls"][1]["status"], "pending",
        "{}",
        reply.text
    );
    let (before, message_before) = rows(&app, &id).await;
    assert_eq!(before[0].1, "pending");
    assert_eq!(before[1].1, "pending");

    app.confirm_ok(&id, "c1", true).await;
    eventually("the approved call is done", || async {
        message(&app, &id).await["toolCalls"][0]["status"] == "done"
    })
    .await;

    let (after, message_after) = rows(&app, &id).await;
    assert_eq!(after[0].1, "done");
    assert_eq!(after[1], before[1], "the other record's row is untouched");
    assert_eq!(
        message_after, message_before,
        "the message row is not rewritten"
    );
    // The API still shows the message as changed when one of its records changed.
    let shown: DateTime<Utc> =
        serde_json::from_value(message(&app, &id).await["updatedAt"].clone()).unwrap();
    let c1_at: DateTime<Utc> = DateTime::parse_from_rfc3339(&after[0].2).unwrap().into();
    assert_eq!(shown, c1_at);
}

#[tokio::test]
async fn the_move_into_rows_can_be_undone() {
    let fresh = fresh_database_url().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let url = if fresh.is_empty() {
        format!("sqlite://{}/old.sqlite?mode=rwc", dir.path().display())
    } else {
        fresh
    };
    let db = Database::connect(&url).await.expect("connect");
    Migrator::up(&db, Some(BEFORE_ROWS))
        .await
        .expect("older schema");
    let id = Uuid::new_v4();
    let records = json!([
        old_record("a", "done", json!([{"type": "text", "text": "3"}]), false),
        old_record("b", "pending", Value::Null, false),
    ]);
    insert_old_message(&db, id, &records, 1, Utc::now()).await;
    Migrator::up(&db, None).await.expect("rows");
    let after_rows = Migrator::migrations().len() as u32 - BEFORE_ROWS;
    Migrator::down(&db, Some(after_rows))
        .await
        .expect("back to arrays");
    let select = Query::select()
        .column("tool_calls")
        .from("messages")
        .and_where(Expr::col("id").eq(id))
        .to_owned();
    let row = db.query_one(&select).await.unwrap().expect("message row");
    let back: Value = row.try_get("", "tool_calls").unwrap();
    assert_eq!(back, records);
    db.close().await.ok();
    drop(dir);
}
