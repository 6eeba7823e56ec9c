//! sea-orm entities, one per table. Only this crate sees these types (`mod entities` is
//! private).

pub mod api_key;
pub mod assistant_server;
pub mod assistant_setting;
pub mod audit_entry;
pub mod catalog_entry;
pub mod catalog_version;
pub mod console_signout;
pub mod conversation;
pub mod gateway_token;
pub mod instance;
pub mod mcp_server;
pub mod message;
pub mod oauth_client;
pub mod oauth_pending;
pub mod oauth_token;
pub mod policy_set;
pub mod preset;
pub mod task;
pub mod tool_call;
pub mod user_attribute;
pub mod xiaozhi_bridge;
