//! mcp-pool: a multi-tenant MCP connection-pool service. This crate is the top floor: the
//! HTTP API ([`api`], axum), the gRPC interface ([`grpc`], tonic) and start-up
//! ([`startup`]); the floors below are crates of their own (see ARCHITECTURE.md):
//!
//! - `mcp-pool-services`: the rules, confirmations, the cluster, the agent loop, the
//!   gateway, the aggregate `app::Services` and the service-level `error::Error`;
//! - `mcp-pool-upstream`: the MCP client, the connection actors and pool, metrics, the
//!   OAuth client;
//! - `mcp-pool-llm`: the LLM providers;
//! - `mcp-pool-store`: the repositories (the only crate that knows sea-orm);
//! - `mcp-pool-core`: domain types, settings, the URL policy, events, telemetry.
//!
//! Their modules are re-exported here under their own names, so `crate::services::…`
//! reads the same in every crate and the tests, benches and load tool reach them as
//! `mcp_pool::…`.

pub mod api;
pub mod grpc;
pub mod startup;

pub use mcp_pool_core::{config, domain, events, invalid, security, telemetry};
pub use mcp_pool_llm as llm;
pub use mcp_pool_services::{agent, app, cluster, confirm, error, gateway, services};
pub use mcp_pool_store as store;
pub use mcp_pool_upstream::{embedded, mcp, metrics, oauth, pool, sandbox};

pub use config::Settings;
pub use startup::Application;
