//! Several instances on one database: `instances` (who is alive, by heartbeat) and the
//! instance owning each message's open tool calls and each Xiaozhi bridge, so only a dead
//! instance's work is settled or taken over.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("instances")
                    .col(pk_uuid("id"))
                    .col(timestamp_with_time_zone("started_at"))
                    .col(timestamp_with_time_zone("heartbeat_at"))
                    .to_owned(),
            )
            .await?;
        for table in ["messages", "xiaozhi_bridges"] {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .add_column(uuid_null("owner_instance"))
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["messages", "xiaozhi_bridges"] {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .drop_column("owner_instance")
                        .to_owned(),
                )
                .await?;
        }
        manager
            .drop_table(Table::drop().table("instances").to_owned())
            .await
    }
}
