//! The first schema: servers, assistant bindings, conversations/messages, API keys,
//! the audit log and admin presets.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("mcp_servers")
                    .col(pk_uuid("id"))
                    .col(string_len("user_id", 128))
                    .col(string_len("name", 256))
                    .col(string_len("transport", 32))
                    .col(boolean("is_active"))
                    .col(text_null("base_url"))
                    // Sealed (encrypted) JSON object; never stored in clear.
                    .col(text_null("headers"))
                    .col(integer_null("timeout_secs"))
                    .col(string_len_null("preset", 64))
                    .col(json_binary("preset_args"))
                    .col(text_null("command"))
                    .col(json_binary("args"))
                    // Sealed (encrypted) JSON object; never stored in clear.
                    .col(text_null("env"))
                    .col(json_binary("disabled_tools"))
                    .col(json_binary("auto_approve_tools"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_mcp_servers_user_name")
                    .table("mcp_servers")
                    .col("user_id")
                    .col("name")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_mcp_servers_preset")
                    .table("mcp_servers")
                    .col("preset")
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("assistant_mcp_servers")
                    .col(string_len("user_id", 128))
                    .col(string_len("assistant_id", 128))
                    .col(uuid("mcp_server_id"))
                    .col(integer("position"))
                    .primary_key(
                        Index::create()
                            .col("user_id")
                            .col("assistant_id")
                            .col("mcp_server_id"),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_assistant_mcp_servers_server")
                            .from("assistant_mcp_servers", "mcp_server_id")
                            .to("mcp_servers", "id")
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_assistant_mcp_servers_server")
                    .table("assistant_mcp_servers")
                    .col("mcp_server_id")
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("conversations")
                    .col(pk_uuid("id"))
                    .col(string_len("user_id", 128))
                    .col(string_len_null("assistant_id", 128))
                    .col(text_null("title"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_conversations_user")
                    .table("conversations")
                    .col("user_id")
                    .col("updated_at")
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("messages")
                    .col(pk_uuid("id"))
                    .col(uuid_null("conversation_id"))
                    .col(string_len("user_id", 128))
                    .col(string_len("role", 16))
                    .col(text("content"))
                    // ToolCallRecord[] embedded in the assistant message (seed 001).
                    .col(json_binary("tool_calls"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_messages_conversation")
                            .from("messages", "conversation_id")
                            .to("conversations", "id")
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_messages_conversation")
                    .table("messages")
                    .col("conversation_id")
                    .col("created_at")
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("api_keys")
                    .col(pk_uuid("id"))
                    .col(string_len("name", 128))
                    .col(string_len("role", 16))
                    // SHA-256 of the key, hex; the key itself is shown once and never stored.
                    .col(string_len_uniq("key_hash", 64))
                    .col(string_len("key_prefix", 16))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone_null("revoked_at"))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("audit_log")
                    .col(pk_uuid("id"))
                    .col(string_len("user_id", 128))
                    .col(uuid_null("mcp_server_id"))
                    .col(string_len("server_name", 256))
                    .col(string_len("tool_name", 256))
                    .col(uuid_null("message_id"))
                    .col(string_len("status", 16))
                    .col(string_len_null("error_code", 64))
                    .col(big_integer_null("latency_ms"))
                    .col(timestamp_with_time_zone("created_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_audit_log_user_time")
                    .table("audit_log")
                    .col("user_id")
                    .col("created_at")
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("presets")
                    .col(pk_uuid("id"))
                    .col(string_len_uniq("name", 64))
                    .col(text("description"))
                    .col(text("command"))
                    .col(json_binary("args"))
                    .col(json_binary("arg_slots"))
                    .col(json_binary("env_slots"))
                    // Sealed (encrypted) JSON object of fixed env values set by the admin.
                    .col(text_null("env"))
                    .col(integer_null("timeout_secs"))
                    .col(timestamp_with_time_zone("created_at"))
                    .col(timestamp_with_time_zone("updated_at"))
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            "presets",
            "audit_log",
            "api_keys",
            "messages",
            "conversations",
            "assistant_mcp_servers",
            "mcp_servers",
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
