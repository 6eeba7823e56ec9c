//! ToolCallRecords move from the `messages.tool_calls` JSON array to one row each in
//! `tool_calls` (keyed by message and call id, ordered by `position`), so an approval
//! writes one small row instead of the whole array. Every existing array is moved into
//! rows here (in Rust, the same statements on SQLite and PostgreSQL), then the column is
//! dropped. `messages.open_calls` stays: the writer keeps it in the same transaction as
//! the rows, and it is what a claim on the message row is conditioned on.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::prelude::{DateTimeUtc, Json as JsonValue, Uuid};
use sea_orm_migration::sea_orm::{ConnectionTrait, Statement};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Messages read per query while moving the arrays.
const PAGE: u64 = 500;
/// Rows per `INSERT` (13 parameters each).
const ROWS_PER_INSERT: usize = 500;

const COLUMNS: [&str; 13] = [
    "message_id",
    "id",
    "position",
    "server_id",
    "server_name",
    "tool_name",
    "display_name",
    "arguments",
    "status",
    "response",
    "is_error",
    "created_at",
    "updated_at",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("tool_calls")
                    .col(uuid("message_id"))
                    // The model's id for the call, unique within its message.
                    .col(string("id"))
                    // Order within the message (0-based, as in the former array).
                    .col(integer("position"))
                    .col(uuid_null("server_id"))
                    .col(text_null("server_name"))
                    .col(text_null("tool_name"))
                    .col(text("display_name"))
                    .col(json_binary("arguments"))
                    .col(string_len("status", 16))
                    .col(json_binary("response"))
                    .col(boolean("is_error"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .primary_key(Index::create().col("message_id").col("id"))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_tool_calls_message")
                            .from("tool_calls", "message_id")
                            .to("messages", "id")
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_tool_calls_position")
                    .table("tool_calls")
                    .col("message_id")
                    .col("position")
                    .unique()
                    .to_owned(),
            )
            .await?;

        move_arrays_to_rows(manager).await?;

        manager
            .alter_table(
                Table::alter()
                    .table("messages")
                    .drop_column("tool_calls")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("messages")
                    .add_column(json_binary("tool_calls").default("[]"))
                    .to_owned(),
            )
            .await?;
        move_rows_to_arrays(manager).await?;
        manager
            .drop_table(Table::drop().table("tool_calls").to_owned())
            .await
    }
}

async fn move_arrays_to_rows(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let db = manager.get_connection();
    let mut after: Option<Uuid> = None;
    loop {
        let mut select = Query::select();
        select
            .columns(["id", "tool_calls", "created_at", "updated_at"])
            .from("messages")
            .order_by("id", Order::Asc)
            .limit(PAGE);
        if let Some(after) = after {
            select.and_where(Expr::col("id").gt(after));
        }
        let rows = db.query_all(&select).await?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = Some(last.try_get::<Uuid>("", "id")?);
        for row in &rows {
            let message: Uuid = row.try_get("", "id")?;
            let calls: JsonValue = row.try_get("", "tool_calls")?;
            let created: DateTimeUtc = row.try_get("", "created_at")?;
            let updated: DateTimeUtc = row.try_get("", "updated_at")?;
            let calls = match calls {
                JsonValue::Array(calls) if !calls.is_empty() => calls,
                _ => continue,
            };
            // A few hundred rows per statement: bound parameters are limited (SQLite).
            let mut calls = calls.into_iter().enumerate().peekable();
            while calls.peek().is_some() {
                let mut insert = Query::insert();
                insert.into_table("tool_calls").columns(COLUMNS);
                for (position, call) in calls.by_ref().take(ROWS_PER_INSERT) {
                    insert
                        .values(row_values(message, position, call, created, updated)?)
                        .map_err(|e| DbErr::Migration(e.to_string()))?;
                }
                db.execute(&insert).await?;
            }
        }
    }
}

/// One element of a stored array (seed 001's camelCase record) as a row's values.
fn row_values(
    message: Uuid,
    position: usize,
    call: JsonValue,
    created: DateTimeUtc,
    updated: DateTimeUtc,
) -> Result<Vec<Expr>, DbErr> {
    let corrupt = |what: &str| {
        DbErr::Migration(format!(
            "message {message}: tool call {position} has no valid {what}"
        ))
    };
    let text = |key: &str| call.get(key).and_then(JsonValue::as_str).map(str::to_owned);
    let id = text("id").ok_or_else(|| corrupt("id"))?;
    let server_id = match text("serverId") {
        Some(id) => Some(Uuid::parse_str(&id).map_err(|_| corrupt("serverId"))?),
        None => None,
    };
    let status = text("status").ok_or_else(|| corrupt("status"))?;
    Ok(vec![
        message.into(),
        id.into(),
        (position as i32).into(),
        server_id.into(),
        text("serverName").into(),
        text("toolName").into(),
        text("displayName").unwrap_or_default().into(),
        Expr::val(call.get("arguments").cloned().unwrap_or(JsonValue::Null)),
        status.into(),
        Expr::val(call.get("response").cloned().unwrap_or(JsonValue::Null)),
        call.get("isError")
            .and_then(JsonValue::as_bool)
            .unwrap_or(false)
            .into(),
        created.into(),
        updated.into(),
    ])
}

async fn move_rows_to_arrays(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let db = manager.get_connection();
    let backend = manager.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT message_id, id, server_id, server_name, tool_name, display_name, \
             arguments, status, response, is_error FROM tool_calls \
             ORDER BY message_id, position",
        ))
        .await?;
    let mut current: Option<(Uuid, Vec<JsonValue>)> = None;
    let mut arrays = Vec::new();
    for row in rows {
        let message: Uuid = row.try_get("", "message_id")?;
        let record = serde_json::json!({
            "id": row.try_get::<String>("", "id")?,
            "serverId": row.try_get::<Option<Uuid>>("", "server_id")?,
            "serverName": row.try_get::<Option<String>>("", "server_name")?,
            "toolName": row.try_get::<Option<String>>("", "tool_name")?,
            "displayName": row.try_get::<String>("", "display_name")?,
            "arguments": row.try_get::<JsonValue>("", "arguments")?,
            "status": row.try_get::<String>("", "status")?,
            "response": row.try_get::<JsonValue>("", "response")?,
            "isError": row.try_get::<bool>("", "is_error")?,
        });
        match &mut current {
            Some((id, records)) if *id == message => records.push(record),
            _ => {
                if let Some(done) = current.replace((message, vec![record])) {
                    arrays.push(done);
                }
            }
        }
    }
    arrays.extend(current);
    for (message, records) in arrays {
        let update = Query::update()
            .table("messages")
            .value("tool_calls", Expr::val(JsonValue::Array(records)))
            .and_where(Expr::col("id").eq(message))
            .to_owned();
        db.execute(&update).await?;
    }
    Ok(())
}
