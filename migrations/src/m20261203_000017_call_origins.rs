//! Who submitted each call of a message (the door, the key, an admin acting for the
//! user), kept with the call: a call approved after its message was read back from the
//! database (a restart, another instance taking it over) is audited as who asked for it,
//! not as an unknown chat call.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Added one at a time: SQLite alters a table one column per statement.
fn columns() -> Vec<ColumnDef> {
    vec![
        string_len_null("via", 16),
        uuid_null("key_id"),
        boolean("by_admin").default(false).to_owned(),
    ]
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in columns() {
            manager
                .alter_table(
                    Table::alter()
                        .table("tool_calls")
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in ["via", "key_id", "by_admin"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("tool_calls")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
