//! Per-assistant tool curation: the user's overrides of how an assistant offers its tools
//! (names, descriptions, hidden and pinned tools), one JSON list per assistant.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("assistant_settings")
                    .add_column(json_binary_null("tool_overrides"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("assistant_settings")
                    .drop_column("tool_overrides")
                    .to_owned(),
            )
            .await
    }
}
