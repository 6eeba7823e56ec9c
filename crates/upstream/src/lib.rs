//! The upstream side of mcp-pool: everything between a call and a user's MCP server (see
//! ARCHITECTURE.md, "mcp-pool-upstream").
//!
//! - [`mcp`]: the MCP client (stdio child, streamable HTTP, legacy SSE), what a server asks
//!   during a call, the connection's side of OAuth.
//! - [`pool`]: one actor per (user, server) owning one live session; catalogs of tools,
//!   resources and prompts.
//! - [`metrics`]: the Prometheus registry and the recent-calls window.
//! - [`oauth`]: rmcp's OAuth client plugged into the URL policy; where tokens are kept is
//!   rmcp's `CredentialStore`, implemented above (the services keep them in the store).
//! - [`sandbox`]: each stdio server's bubblewrap sandbox and its egress proxy.
//! - [`embedded`]: in-process servers (clock, calculator).
//! - [`actors`]: what both actor families share about ractor.

pub mod actors;
pub mod embedded;
pub mod mcp;
pub mod metrics;
pub mod oauth;
pub mod pool;
pub mod sandbox;

// The ground floor's modules under their own names, so paths read `crate::domain::UserId`
// in every crate.
use mcp_pool_core::{config, domain, security};
