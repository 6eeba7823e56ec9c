//! Credentials inside a server's URL (user name, password, query values) are sealed like
//! headers: `base_url` keeps the URL with them masked, `base_url_sealed` the whole URL
//! encrypted. Sealing needs the key, which migrations do not have: the service seals rows
//! stored in clear right after migrating (`ServerRepo::seal_clear_urls`).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("mcp_servers")
                    .add_column(text_null("base_url_sealed"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("mcp_servers")
                    .drop_column("base_url_sealed")
                    .to_owned(),
            )
            .await
    }
}
