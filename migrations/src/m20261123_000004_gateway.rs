//! The gateway: per-assistant tokens for `/mcp/assistants/{id}` and the Xiaozhi
//! WebSocket bridges (one per assistant; the endpoint URL carries a token, so it is sealed).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("gateway_tokens")
                    .col(pk_uuid("id"))
                    .col(string_len("user_id", 128))
                    .col(string_len("assistant_id", 128))
                    .col(string_len("name", 128))
                    .col(string_len("token_hash", 64).unique_key())
                    .col(string_len("token_prefix", 16))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_gateway_tokens_owner")
                    .table("gateway_tokens")
                    .col("user_id")
                    .col("assistant_id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("xiaozhi_bridges")
                    .col(pk_uuid("id"))
                    .col(string_len("user_id", 128))
                    .col(string_len("assistant_id", 128))
                    // Sealed (encrypted): the endpoint URL holds the access token.
                    .col(text("endpoint"))
                    .col(boolean("enabled"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_xiaozhi_bridges_owner")
                    .table("xiaozhi_bridges")
                    .col("user_id")
                    .col("assistant_id")
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("xiaozhi_bridges").to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table("gateway_tokens").to_owned())
            .await
    }
}
