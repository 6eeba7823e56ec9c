//! The audit log as the operators' console reads it: who decided (`decided_by`, the admin
//! key that approved or rejected a user's call; NULL for calls the user decided or that
//! ran by themselves) and indexes for its filters, each ending in `created_at` because
//! every query is newest first.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// (index name, leading column); `ix_audit_log_user_time` exists since the first schema.
const INDEXES: [(&str, Option<&str>); 4] = [
    ("ix_audit_log_time", None),
    ("ix_audit_log_server_time", Some("mcp_server_id")),
    ("ix_audit_log_tool_time", Some("tool_name")),
    ("ix_audit_log_status_time", Some("status")),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("audit_log")
                    .add_column(string_len_null("decided_by", 64))
                    .to_owned(),
            )
            .await?;
        for (name, leading) in INDEXES {
            let mut index = Index::create();
            index.name(name).table("audit_log");
            if let Some(column) = leading {
                index.col(column);
            }
            manager
                .create_index(index.col("created_at").to_owned())
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, _) in INDEXES {
            manager
                .drop_index(Index::drop().name(name).table("audit_log").to_owned())
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table("audit_log")
                    .drop_column("decided_by")
                    .to_owned(),
            )
            .await
    }
}
