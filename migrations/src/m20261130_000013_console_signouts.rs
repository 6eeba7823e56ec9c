//! Console sign-out ends the session on the server: the sealed cookie carries a session id,
//! and a signed-out id is kept here until the session would have expired, so the cookie
//! is refused by every instance even if someone kept a copy.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("console_signouts")
                    .col(uuid("session_id").primary_key())
                    .col(timestamp_with_time_zone("expires_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("console_signouts").to_owned())
            .await
    }
}
