//! sea-orm entities, one per table. Only `store/` sees these types.

pub mod api_key;
pub mod assistant_server;
pub mod audit_entry;
pub mod conversation;
pub mod gateway_token;
pub mod instance;
pub mod mcp_server;
pub mod message;
pub mod preset;
pub mod tool_call;
pub mod xiaozhi_bridge;
