//! Quotas: the operator's limits on tool calls per window, saved with the policy rules,
//! and their counts, one row per quota, subject (a user, or `*` for a shared count) and
//! window, so that every instance counts against the same number.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("policy_sets")
                    .add_column(json_binary_null("quotas"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("quota_usage")
                    .col(string("quota"))
                    .col(string("subject"))
                    // Seconds since the epoch at which the window ends (UTC).
                    .col(big_integer("window_end"))
                    .col(big_integer("used"))
                    .primary_key(
                        Index::create()
                            .col("quota")
                            .col("subject")
                            .col("window_end"),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("quota_usage_by_window_end")
                    .table("quota_usage")
                    .col("window_end")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("quota_usage").to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("policy_sets")
                    .drop_column("quotas")
                    .to_owned(),
            )
            .await
    }
}
