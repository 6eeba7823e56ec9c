//! `messages.metadata`: what the agent loop knows about an assistant message beyond its
//! text and ToolCallRecords - the model it came from, the text of each round (so a later
//! turn can replay the rounds in order) and why the turn ended.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("messages")
                    .add_column(json_binary_null("metadata"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("messages")
                    .drop_column("metadata")
                    .to_owned(),
            )
            .await
    }
}
