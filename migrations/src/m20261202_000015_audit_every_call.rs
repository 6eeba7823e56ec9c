//! The audit log records every tool call on every path (issue 40): the door it came in
//! by (`via`), the key or gateway token it came with (`key_id`, `by_admin` when an admin's
//! key acted for the user), the instance that ran it, its arguments and result as the
//! redaction rule leaves them, and its error in words. The server filter takes a name too.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Added one at a time: SQLite alters a table one column per statement.
fn columns() -> Vec<ColumnDef> {
    vec![
        string_len_null("via", 16),
        string_len_null("key_id", 64),
        boolean("by_admin").default(false).to_owned(),
        uuid_null("instance_id"),
        text_null("arguments"),
        text_null("result"),
        text_null("error_message"),
    ]
}

/// Indexes of the console's first audit filters, dropped (see `up`).
const DROPPED: [&str; 3] = [
    "ix_audit_log_server_time",
    "ix_audit_log_tool_time",
    "ix_audit_log_status_time",
];

const COLUMNS: [&str; 7] = [
    "via",
    "key_id",
    "by_admin",
    "instance_id",
    "arguments",
    "result",
    "error_message",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in columns() {
            manager
                .alter_table(
                    Table::alter()
                        .table("audit_log")
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("ix_audit_log_server_name_time")
                    .table("audit_log")
                    .col("server_name")
                    .col("created_at")
                    .to_owned(),
            )
            .await?;
        // Every call now writes a row: each index is paid for by every call. Kept: time,
        // user and time, server name and time; a filter on tool, outcome or server id
        // walks the time index (newest first, as every read is).
        for name in DROPPED {
            manager
                .drop_index(Index::drop().name(name).table("audit_log").to_owned())
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, column) in DROPPED.iter().zip(["mcp_server_id", "tool_name", "status"]) {
            manager
                .create_index(
                    Index::create()
                        .name(*name)
                        .table("audit_log")
                        .col(column)
                        .col("created_at")
                        .to_owned(),
                )
                .await?;
        }
        manager
            .drop_index(
                Index::drop()
                    .name("ix_audit_log_server_name_time")
                    .table("audit_log")
                    .to_owned(),
            )
            .await?;
        for column in COLUMNS {
            manager
                .alter_table(
                    Table::alter()
                        .table("audit_log")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
