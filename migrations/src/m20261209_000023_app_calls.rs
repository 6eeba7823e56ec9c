//! MCP Apps: a tool call a server's view (an app) made through its host is marked as such,
//! on its audit row and, while it waits for approval, on its call's row.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["audit_log", "tool_calls"] {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .add_column(boolean("from_app").default(false))
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["audit_log", "tool_calls"] {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .drop_column("from_app")
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
