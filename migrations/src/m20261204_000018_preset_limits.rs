//! A preset's own limits on each of its servers (memory, processes and threads), over the
//! pool's defaults: a browser needs more than most servers.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite alters a table one column at a time.
        for column in [integer_null("memory_limit_mib"), integer_null("max_tasks")] {
            manager
                .alter_table(
                    Table::alter()
                        .table("presets")
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in ["memory_limit_mib", "max_tasks"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("presets")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
