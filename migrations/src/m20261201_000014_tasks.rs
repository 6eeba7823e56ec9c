//! Tasks (the MCP tasks extension, and `Prefer: respond-async` on the REST API): a tool
//! call that outlives the request that started it. A row per task, so any instance can
//! answer for it and a task whose instance died is failed, never left working.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("tasks")
                    .col(uuid("id").primary_key())
                    .col(string("user_id"))
                    // Set for a gateway client's task: only that assistant's clients see it.
                    .col(string_null("assistant_id"))
                    .col(string_len("origin", 16))
                    .col(text("server_name"))
                    .col(text("tool_name"))
                    .col(string_len("status", 16))
                    .col(text_null("status_message"))
                    .col(json_binary_null("result"))
                    .col(json_binary_null("error"))
                    // While `input_required`: what the call waits for, by key.
                    .col(json_binary_null("input_requests"))
                    .col(uuid("instance_id"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .col(timestamp_with_time_zone("expires_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("tasks_by_user")
                    .table("tasks")
                    .col("user_id")
                    .col("created_at")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("tasks_by_status")
                    .table("tasks")
                    .col("status")
                    .col("instance_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("tasks").to_owned())
            .await
    }
}
