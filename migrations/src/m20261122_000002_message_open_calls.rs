//! `messages.open_calls`: how many of a message's tool calls are pending or invoking, so
//! start-up can find and settle records a previous process left open (JSON columns cannot
//! be queried the same way on SQLite and PostgreSQL).

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
                    .add_column(integer("open_calls").default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_messages_open_calls")
                    .table("messages")
                    .col("open_calls")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ix_messages_open_calls")
                    .table("messages")
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("messages")
                    .drop_column("open_calls")
                    .to_owned(),
            )
            .await
    }
}
