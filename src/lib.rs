//! mcp-pool: a multi-tenant MCP connection-pool service.
//!
//! A tour of the layers, outside in (see ARCHITECTURE.md for the invariants):
//! - [`api`]: axum routes, auth extractors, request/response shapes, the one error mapping.
//! - [`app`]: the aggregate of every service, built once; what `api` and `grpc` hold.
//! - [`services`]: domain logic and rules (limits, presets, URL policy, key handling).
//! - [`agent`]: the chat loop (LLM rounds, tool calls, prompt mode) on top of services.
//! - [`llm`]: the LLM providers' wire formats, streaming and retries.
//! - [`domain`]: validated types (`UserId`, `ServerName`, `ServerSpec`, `PresetSpec`, ...).
//! - [`store`]: sea-orm entities and repositories; the only module that touches the DB.
//! - [`security`]: sealing secrets at rest, the outbound-URL guard, API key material.
//! - [`config`], [`telemetry`], [`startup`]: settings, logging, and `Application`.

mod actors;
pub mod agent;
pub mod api;
pub mod app;
pub mod cluster;
pub mod config;
pub mod confirm;
pub mod domain;
pub mod embedded;
pub mod error;
pub mod events;
pub mod gateway;
pub mod grpc;
pub mod llm;
pub mod mcp;
pub mod metrics;
pub mod oauth;
pub mod pool;
pub mod security;
pub mod services;
pub mod startup;
pub mod store;
pub mod telemetry;

pub use config::Settings;
pub use startup::Application;
