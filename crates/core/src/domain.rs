//! Domain types: validated identifiers and the definitions users and admins manage.
//!
//! Everything here is parsed at the edge and valid afterwards; nothing here knows HTTP,
//! JSON field names or the database.

pub mod app_ui;
mod call_origin;
mod catalog;
mod curation;
mod ids;
mod policy;
mod preset;
mod sandbox;
mod secret_map;
mod secret_url;
mod server;
mod task;
mod tool_call;
pub mod tool_name;
pub mod tool_search;

pub use call_origin::{CallOrigin, CallVia};
pub use catalog::{
    CatalogEntry, CatalogVersion, EntryKind, Field, PackageRuntime, Resolved, Runnable,
    SERVER_JSON_SCHEMA_VERSION, ServerJson, newer_version, whole_match,
};
pub use curation::{ToolOverride, ToolOverrides};
pub use ids::{AssistantId, InstanceId, ServerName, UserId};
pub use policy::{
    MAX_RULES, PolicyAction, PolicyRule, PolicySet, Quota, QuotaMeasure, QuotaSubject, QuotaWindow,
    RuleScope, UserAttributes, check_group,
};
pub use preset::{LaunchSpec, Preset, PresetSpec, Slot};
pub use sandbox::{NetworkMode, SandboxSpec, host_allowed};
pub use secret_map::{MASK, SecretMap};
pub use secret_url::SecretUrl;
pub use server::{
    CatalogUse, EmbeddedKind, McpServer, OAuthClientSettings, RemoteEndpoint, RootEntry,
    SamplingPolicy, SamplingSettings, ServerSpec, SessionScope, StdioLaunch, Transport,
    TransportKind,
};
pub use task::{TaskOrigin, TaskStatus};
pub use tool_call::{ToolCallRecord, ToolCallStatus};
pub use tool_search::ToolExposure;

/// The current time at the precision every supported database stores (microseconds), so
/// what a create returns equals what later reads return.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    use chrono::SubsecRound;
    chrono::Utc::now().trunc_subsecs(6)
}
