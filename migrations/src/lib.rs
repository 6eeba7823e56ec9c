//! Database schema for mcp-pool, as timestamped sea-orm migrations.
//!
//! One `Migrator` runs the same migrations on SQLite (the embedded default) and PostgreSQL.
//! Migrations are append-only: a released migration is never edited, a change is a new file.

pub use sea_orm_migration::prelude::*;

mod m20261122_000001_initial_schema;
mod m20261122_000002_message_open_calls;
mod m20261123_000003_message_metadata;
mod m20261123_000004_gateway;
mod m20261123_000005_instances;
mod m20261124_000006_sealed_base_url;
mod m20261125_000007_tool_call_rows;
mod m20261126_000008_oauth;
mod m20261127_000009_assistant_settings;
mod m20261128_000010_server_client_features;
mod m20261129_000011_audit_console;
mod m20261130_000012_verified_registrations;
mod m20261130_000013_console_signouts;
mod m20261201_000014_tasks;
mod m20261202_000015_audit_every_call;
mod m20261202_000016_operator_lists;
mod m20261203_000017_call_origins;
mod m20261204_000018_preset_limits;
mod m20261205_000019_task_upstream;
mod m20261206_000020_catalog;
mod m20261207_000021_governance;
mod m20261208_000022_quotas;
mod m20261209_000023_app_calls;
mod m20261210_000024_tool_curation;
mod m20261211_000025_tool_exposure;
mod m20261212_000026_preset_sandbox;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_initial_schema::Migration),
            Box::new(m20261122_000002_message_open_calls::Migration),
            Box::new(m20261123_000003_message_metadata::Migration),
            Box::new(m20261123_000004_gateway::Migration),
            Box::new(m20261123_000005_instances::Migration),
            Box::new(m20261124_000006_sealed_base_url::Migration),
            Box::new(m20261125_000007_tool_call_rows::Migration),
            Box::new(m20261126_000008_oauth::Migration),
            Box::new(m20261127_000009_assistant_settings::Migration),
            Box::new(m20261128_000010_server_client_features::Migration),
            Box::new(m20261129_000011_audit_console::Migration),
            Box::new(m20261130_000012_verified_registrations::Migration),
            Box::new(m20261130_000013_console_signouts::Migration),
            Box::new(m20261201_000014_tasks::Migration),
            Box::new(m20261202_000015_audit_every_call::Migration),
            Box::new(m20261202_000016_operator_lists::Migration),
            Box::new(m20261203_000017_call_origins::Migration),
            Box::new(m20261204_000018_preset_limits::Migration),
            Box::new(m20261205_000019_task_upstream::Migration),
            Box::new(m20261206_000020_catalog::Migration),
            Box::new(m20261207_000021_governance::Migration),
            Box::new(m20261208_000022_quotas::Migration),
            Box::new(m20261209_000023_app_calls::Migration),
            Box::new(m20261210_000024_tool_curation::Migration),
            Box::new(m20261211_000025_tool_exposure::Migration),
            Box::new(m20261212_000026_preset_sandbox::Migration),
        ]
    }
}
