//! Per-user OAuth 2.1 to remote MCP servers (the MCP authorization spec).
//!
//! - `mcp_servers.oauth_client`: the server's pre-registered client and scopes, sealed.
//! - `oauth_tokens`: one row per (user, server) that asked for authorization. `credentials`
//!   (sealed) is NULL until the user completes the flow and again after they forget it;
//!   `client` (sealed) is what refreshing and revoking need without a new discovery. The
//!   `refresh_lock_*` lease serializes refreshes across instances, so a rotating refresh
//!   token is never used twice.
//! - `oauth_pending`: one row per authorization in progress, keyed by a hash of its
//!   `state` (the callback's only credential), single-use and short-lived.
//! - `oauth_clients`: dynamic registrations, reused per (issuer, redirect URI).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("mcp_servers")
                    .add_column(text_null("oauth_client"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("oauth_tokens")
                    .col(string_len("user_id", 128))
                    .col(uuid("server_id"))
                    .col(text_null("credentials"))
                    .col(text_null("client"))
                    .col(text_null("issuer"))
                    .col(json_binary("scopes"))
                    .col(timestamp_with_time_zone_null("expires_at"))
                    .col(integer("step_ups").default(0))
                    .col(big_integer_null("refresh_lock_until"))
                    .col(string_len_null("refresh_lock_holder", 64))
                    .col(timestamp_with_time_zone("updated_at"))
                    .primary_key(Index::create().col("user_id").col("server_id"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("oauth_pending")
                    .col(string_len("state_hash", 64).primary_key())
                    .col(string_len("user_id", 128))
                    .col(uuid("server_id"))
                    .col(text("flow"))
                    .col(text("authorization_url"))
                    .col(timestamp_with_time_zone("expires_at"))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_oauth_pending_user_server")
                    .table("oauth_pending")
                    .col("user_id")
                    .col("server_id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("oauth_clients")
                    .col(text("issuer"))
                    .col(text("redirect_uri"))
                    .col(text("client_id"))
                    .col(text_null("client_secret"))
                    .col(timestamp_with_time_zone("created_at"))
                    .primary_key(Index::create().col("issuer").col("redirect_uri"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["oauth_clients", "oauth_pending", "oauth_tokens"] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table("mcp_servers")
                    .drop_column("oauth_client")
                    .to_owned(),
            )
            .await
    }
}
