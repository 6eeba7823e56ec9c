//! What the operators' lists read at 100,000 users and millions of rows: the approval
//! queue (calls `pending`, oldest first) without scanning every call.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("ix_tool_calls_status_time")
                    .table("tool_calls")
                    .col("status")
                    .col("created_at")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ix_tool_calls_status_time")
                    .table("tool_calls")
                    .to_owned(),
            )
            .await
    }
}
