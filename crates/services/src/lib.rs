//! The domain services of mcp-pool (see ARCHITECTURE.md, "mcp-pool-services").
//!
//! - [`services`]: the rules: what may be created, changed, bound and by whom; limits;
//!   tool calls; OAuth flows; what servers ask during a call.
//! - [`confirm`]: one actor per message parks its tool calls until the user decides.
//! - [`cluster`]: several instances on one database.
//! - [`agent`]: the chat loop (LLM rounds, tool calls, prompt mode).
//! - [`gateway`]: an assistant's servers as one MCP server; Xiaozhi bridges.
//! - [`app`]: the aggregate of every service, built once.
//! - [`error`]: the service-level error with stable codes, where the lower crates'
//!   errors meet.
//!
//! Dependencies point one way: `app` → `agent`, `gateway` → `services` → `confirm`,
//! `cluster` (checked by `tools/module-cycles.py`).

pub mod agent;
pub mod app;
pub mod cluster;
pub mod confirm;
pub mod error;
pub mod gateway;
pub mod services;

// The lower crates' modules under their own names, so paths read the same in every crate.
use mcp_pool_core::{config, domain, events, invalid, security};
use mcp_pool_llm as llm;
use mcp_pool_store as store;
use mcp_pool_upstream::{actors, mcp, metrics, oauth, pool, sandbox};
