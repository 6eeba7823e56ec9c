//! What a server may ask of its client, per server: `sampling` (the policy and the model
//! its requests run on) and `roots` (the list `roots/list` answers outside the gateway),
//! both JSON, NULL meaning the defaults (sampling denied, no roots); and `session_scope`
//! (`user` or `conversation`; NULL is `user`).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite alters a table one column at a time.
        for column in ["sampling", "roots"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("mcp_servers")
                        .add_column(json_binary_null(column))
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table("mcp_servers")
                    .add_column(string_len_null("session_scope", 16))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in ["sampling", "roots", "session_scope"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("mcp_servers")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
