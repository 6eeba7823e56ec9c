//! Domain logic: what may be created, changed, bound and who may do it.
//!
//! Services validate input into domain types, enforce per-user limits and map storage
//! outcomes (a duplicate row, a missing row) to meaningful errors. They know neither HTTP
//! nor SQL.

mod assistants;
mod cluster_duties;
pub mod elicitations;
mod gateway;
pub mod global_servers;
mod keys;
pub mod oauth;
pub mod operators;
mod parked;
mod presets;
mod rate_limits;
pub mod sampling;
mod server_logs;
mod servers;
mod tool_calls;
mod upstream;

pub use assistants::AssistantService;
pub use gateway::{GatewayPrincipal, GatewayService, GatewayTools};
pub use global_servers::{GlobalServers, GlobalServersReloader};
pub use keys::{ConsoleSession, KeyService, Principal, console_csrf};
pub use oauth::OAuthService;
pub use operators::OperatorService;
pub use presets::{PresetInput, PresetService, SlotInput};
pub use servers::{OAuthInput, ServerInput, ServerService};
pub use tool_calls::{ModelToolCall, ToolCallService, plan_calls};
pub use upstream::{
    AssistantTool, AssistantTools, Caller, ConnectReport, HealthReport, ServerCatalog,
    ToolCallReport, UnavailableServer, UpstreamService,
};

use std::sync::Arc;

use crate::agent::ChatService;
use crate::cluster::Cluster;
use crate::config::Settings;
use crate::confirm::{ConfirmDeps, Confirmations};
use crate::events::EventHub;
use crate::gateway::xiaozhi::XiaozhiBridges;
use crate::pool::Pool;
use crate::security::UrlPolicy;
use crate::store::Store;
pub use rate_limits::RateLimits;

/// Every service, cheap to clone into request handlers.
#[derive(Clone)]
pub struct Services {
    pub store: Store,
    pub servers: ServerService,
    pub assistants: AssistantService,
    pub presets: PresetService,
    pub keys: KeyService,
    pub operators: OperatorService,
    pub upstream: UpstreamService,
    pub oauth: OAuthService,
    pub elicitations: elicitations::Elicitations,
    pub sampling: sampling::Sampling,
    pub tool_calls: ToolCallService,
    pub chat: ChatService,
    pub gateway: GatewayService,
    pub xiaozhi: XiaozhiBridges,
    pub confirmations: Confirmations,
    pub events: Arc<EventHub>,
    pub pool: Pool,
    pub cluster: Cluster,
    /// Dropped when another instance changes bindings.
    bindings: assistants::BindingCache,
}

impl Services {
    pub async fn new(
        store: Store,
        settings: Arc<Settings>,
        pool: Pool,
        cluster: Cluster,
    ) -> crate::error::Result<Self> {
        let url_policy = Arc::new(UrlPolicy::from_settings(&settings.security));
        let events = Arc::new(EventHub::new(settings.events.replay_buffer));
        let bindings = assistants::BindingCache::new(store.clone(), cluster.clone());
        let oauth = OAuthService::new(
            store.clone(),
            settings.clone(),
            url_policy.clone(),
            events.clone(),
            pool.clone(),
            cluster.clone(),
        );
        server_logs::relay(&pool, events.clone());
        let rate_limits = Arc::new(RateLimits::new(&settings.limits));
        let sampling = sampling::Sampling::new(
            events.clone(),
            crate::llm::LlmClient::new(&settings.llm),
            rate_limits.clone(),
            std::time::Duration::from_secs(settings.sampling.timeout_secs),
            settings.llm.max_tokens,
        );
        let elicitations = elicitations::Elicitations::new(
            events.clone(),
            std::time::Duration::from_secs(settings.elicitation.timeout_secs),
            sampling.clone(),
        );
        let upstream = UpstreamService::new(
            store.clone(),
            settings.clone(),
            url_policy.clone(),
            pool.clone(),
            Arc::new(GlobalServers::default()),
            bindings.clone(),
            upstream::UserFacing {
                oauth: oauth.clone(),
                elicitations: elicitations.clone(),
                rate_limits,
            },
        );
        let confirmations = Confirmations::start(ConfirmDeps {
            store: store.clone(),
            events: events.clone(),
            executor: tool_calls::executor(upstream.clone(), settings.limits.max_result_bytes),
            timeout: std::time::Duration::from_secs(settings.confirmation.timeout_secs),
            parked: Arc::default(),
            cluster: cluster.clone(),
        })
        .await?;
        let chat = ChatService::new(
            store.clone(),
            settings.clone(),
            upstream.clone(),
            confirmations.clone(),
            events.clone(),
        );
        let gateway = GatewayService::new(
            store.clone(),
            settings.clone(),
            upstream.clone(),
            confirmations.clone(),
            bindings.clone(),
        );
        let xiaozhi = XiaozhiBridges::new(
            gateway.clone(),
            store.clone(),
            settings.clone(),
            url_policy.clone(),
            cluster.clone(),
        );
        let operators = OperatorService::new(store.clone(), cluster.clone());
        Ok(Self {
            chat,
            gateway,
            xiaozhi,
            servers: ServerService::new(
                store.clone(),
                settings.clone(),
                url_policy,
                pool.clone(),
                bindings.clone(),
                cluster.clone(),
                oauth.clone(),
            ),
            oauth,
            elicitations,
            sampling,
            tool_calls: ToolCallService::new(
                store.clone(),
                settings.clone(),
                upstream.clone(),
                confirmations.clone(),
            ),
            upstream,
            confirmations,
            events,
            pool,
            cluster,
            assistants: AssistantService::new(store.clone(), settings.clone(), bindings.clone()),
            bindings,
            presets: PresetService::new(store.clone(), settings.clone()),
            keys: KeyService::new(store.clone(), &settings),
            operators,
            store,
        })
    }
}

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
