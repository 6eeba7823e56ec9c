//! Per-assistant settings: for now how the gateway names its servers' tools and prompts
//! (`gateway_prefix`; NULL follows `gateway.prefix`).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("assistant_settings")
                    .col(string_len("user_id", 128))
                    .col(string_len("assistant_id", 128))
                    .col(string_len_null("gateway_prefix", 16))
                    .col(timestamp_with_time_zone("updated_at"))
                    .primary_key(Index::create().col("user_id").col("assistant_id"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("assistant_settings").to_owned())
            .await
    }
}
