//! A task whose server made a task of the call: which server and the server's own task id,
//! so another instance (or the same one restarted) can follow it on when the instance
//! following it stops, instead of failing it.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite alters a table one column at a time.
        for column in [uuid_null("server_id"), text_null("upstream_task_id")] {
            manager
                .alter_table(Table::alter().table("tasks").add_column(column).to_owned())
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in ["server_id", "upstream_task_id"] {
            manager
                .alter_table(Table::alter().table("tasks").drop_column(column).to_owned())
                .await?;
        }
        Ok(())
    }
}
