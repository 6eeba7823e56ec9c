//! One module per scenario; each starts what it needs, prints a table (or `--json`) and
//! stops everything it started.

pub mod actors;
pub mod call_overhead;
pub mod chat;
pub mod cluster;
pub mod confirmations;
pub mod operator_lists;
pub mod peers;
pub mod sandbox;
pub mod soak;
pub mod tool_search;
