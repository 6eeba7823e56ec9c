//! The ground floor of mcp-pool: what every other crate builds on and nothing here builds
//! on them (see ARCHITECTURE.md, "mcp-pool-core").
//!
//! - [`domain`]: validated types (`UserId`, `ServerName`, `ServerSpec`, `PresetSpec`, ...),
//!   parsed at the edge and valid afterwards; no I/O.
//! - [`invalid`]: what the domain's parsers and the URL policy refuse.
//! - [`config`]: the typed settings; every limit is a value here.
//! - [`security`]: sealing secrets at rest, the outbound-URL policy and the one dialer of
//!   outbound HTTP clients, API key material.
//! - [`events`]: the per-user event hub behind `GET /api/events`.
//! - [`telemetry`]: logging and (feature `otlp`) span export.

pub mod config;
pub mod domain;
pub mod events;
pub mod invalid;
pub mod security;
pub mod telemetry;

pub use config::Settings;
pub use invalid::InvalidInput;
