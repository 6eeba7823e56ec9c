//! Domain logic: what may be created, changed, bound and who may do it.
//!
//! Services validate input into domain types, enforce per-user limits and map storage
//! outcomes (a duplicate row, a missing row) to meaningful errors. They know neither HTTP
//! nor SQL.

pub(crate) mod assistants;
pub mod audit;
mod authenticator;
mod catalog;
pub mod elicitations;
mod gateway;
pub mod global_servers;
mod keys;
pub mod oauth;
pub mod operators;
pub(crate) mod parked;
pub mod policies;
pub use parked::ParkLimits;
mod presets;
mod rate_limits;
pub mod sampling;
pub(crate) mod server_logs;
mod servers;
pub mod tasks;
pub(crate) mod tool_calls;
pub(crate) mod upstream;

pub use assistants::AssistantService;
pub use audit::AuditTrail;
pub use catalog::{
    CatalogService, EntryDetail, EntryUpdate, ImportedEntry, Page, RegistrySync, SkippedEntry,
    SyncReport,
};
pub use gateway::{GatewayChannel, GatewayPrincipal, GatewayService, GatewayTools};
pub use global_servers::{GlobalServers, GlobalServersReloader};
pub use keys::{ConsoleSession, KeyService, Principal, console_csrf};
pub use oauth::OAuthService;
pub use operators::OperatorService;
pub use policies::Policies;
pub use presets::{PresetInput, PresetService, SlotInput};
pub use rate_limits::RateLimits;
pub use servers::{OAuthInput, ServerInput, ServerService};
pub use tasks::{FollowOn, NewTask, Started, TaskEnd, TaskHandle, TaskWork, Tasks};
pub use tool_calls::{
    ModelToolCall, SearchMode, ToolCallService, plan_calls, plan_search_mode_calls,
};
pub use upstream::{
    AssistantTool, AssistantTools, Audience, Caller, ConnectReport, HealthReport, SearchArguments,
    ServerCatalog, ToolCallReport, UnavailableServer, UpstreamService, called_through,
    checked_limit, checked_query, found_tools,
};

/// Trims, refuses empty/odd entries, drops duplicates (keeping first order) and bounds
/// the length of a tool-name list.
fn normalize_tool_list(
    field: &str,
    tools: Vec<String>,
    max: usize,
) -> crate::error::Result<Vec<String>> {
    if tools.len() > max {
        return Err(crate::error::Error::validation(format!(
            "{field} has more than {max} entries"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let tool = tool.trim().to_owned();
        if tool.is_empty() || tool.len() > 128 || tool.chars().any(char::is_control) {
            return Err(crate::error::Error::validation(format!(
                "{field} entries must be 1 to 128 characters without control characters"
            )));
        }
        if seen.insert(tool.clone()) {
            out.push(tool);
        }
    }
    Ok(out)
}
