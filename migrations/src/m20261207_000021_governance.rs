//! Governance: what the backend says about each user (groups, plan), and the operator's
//! policy rules, every saved set kept by version (the newest is in force).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("user_attributes")
                    .col(string("user_id").primary_key())
                    .col(json_binary("groups"))
                    .col(string_len_null("plan", 64))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("policy_sets")
                    // Two instances saving at once cannot both take the next version.
                    .col(big_integer("version").primary_key())
                    .col(json_binary("rules"))
                    .col(string_null("created_by"))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["policy_sets", "user_attributes"] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
