//! Tool search: how an assistant offers its tools to the model, all of them or a search
//! over them (`all` or `search`; NULL: `all`).

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
                    .add_column(string_null("tool_exposure"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("assistant_settings")
                    .drop_column("tool_exposure")
                    .to_owned(),
            )
            .await
    }
}
