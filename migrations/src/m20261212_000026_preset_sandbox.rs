//! A preset's sandbox: the network its servers get and the host paths an admin shares
//! with them (JSON; absent: the pool's defaults).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("presets")
                    .add_column(json_binary_null("sandbox"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("presets")
                    .drop_column("sandbox")
                    .to_owned(),
            )
            .await
    }
}
