//! The server catalog: entries in the MCP Registry's `server.json` format, every imported
//! version kept, the operator's choices per entry (enabled, pinned version, fixed values,
//! patterns), and which entry (and pinned version) a user's server was made from.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("catalog_entries")
                    .col(string_len("name", 200).primary_key())
                    // Off until the operator enables it: nothing runs that was not chosen.
                    .col(boolean("enabled"))
                    .col(string_len("latest_version", 255))
                    .col(string_len_null("pinned_version", 255))
                    // Values the operator fixes for everyone (sealed JSON object).
                    .col(text_null("fixed_values"))
                    // Field name → regular expression a user's value must match.
                    .col(json_binary("patterns"))
                    // Of the latest version, so listing and search need no document.
                    .col(text("title"))
                    .col(text("description"))
                    .col(string_len("kind", 16))
                    // Space-separated, with a space at each end, so one tag is `LIKE '% t %'`.
                    .col(text("tags"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("catalog_versions")
                    .col(string_len("name", 200))
                    .col(string_len("version", 255))
                    // The server.json as imported (validated against the pinned schema).
                    .col(json_binary("document"))
                    .col(timestamp_with_time_zone("imported_at"))
                    .primary_key(Index::create().col("name").col("version"))
                    .to_owned(),
            )
            .await?;
        // One column per statement: SQLite alters a table one column at a time.
        for column in [
            string_len_null("catalog_entry", 200),
            string_len_null("catalog_version", 255),
            json_binary_null("catalog_values"),
            text_null("catalog_secrets"),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table("mcp_servers")
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("mcp_servers_by_catalog_entry")
                    .table("mcp_servers")
                    .col("catalog_entry")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("mcp_servers_by_catalog_entry")
                    .table("mcp_servers")
                    .to_owned(),
            )
            .await?;
        for column in [
            "catalog_entry",
            "catalog_version",
            "catalog_values",
            "catalog_secrets",
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table("mcp_servers")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        for table in ["catalog_versions", "catalog_entries"] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
