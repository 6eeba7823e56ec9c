//! The aggregate: every service built once and wired together, which HTTP, gRPC and
//! start-up hold, and what an instance does for the others (`cluster_duties.rs`). It sits
//! above `services`, `agent` and `gateway`, which build on each other but never import it,
//! so the module graph has no circle.

mod cluster_duties;

use std::sync::Arc;

use crate::agent::ChatService;
use crate::cluster::Cluster;
use crate::config::Settings;
use crate::confirm::{ConfirmDeps, Confirmations};
use crate::events::EventHub;
use crate::gateway::xiaozhi::XiaozhiBridges;
use crate::pool::Pool;
use crate::security::UrlPolicy;
use crate::services::assistants::BindingCache;
use crate::services::{
    AssistantService, AuditTrail, CatalogService, GatewayService, GlobalServers, KeyService,
    OAuthService, OperatorService, Policies, PresetService, RateLimits, ServerService, Tasks,
    ToolCallService, UpstreamService, elicitations, sampling, server_logs, tool_calls, upstream,
};
use crate::store::Store;

/// Every service, cheap to clone into request handlers.
#[derive(Clone)]
pub struct Services {
    pub store: Store,
    pub servers: ServerService,
    pub assistants: AssistantService,
    pub presets: PresetService,
    pub catalog: CatalogService,
    pub policies: Policies,
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
    pub tasks: Tasks,
    /// The 2026-07-28 rounds of this instance's gateway handlers; retries of rounds held
    /// by another instance are handed there.
    pub rounds: crate::gateway::rounds::Rounds,
    /// Every tool call's audit row, journaled and written in batches.
    pub audit: AuditTrail,
    pub events: Arc<EventHub>,
    pub pool: Pool,
    pub cluster: Cluster,
    /// Answers to parked requests another instance holds, and their verdicts.
    forwarder: crate::services::parked::forward::Forwarder,
    /// Dropped when another instance changes bindings.
    bindings: BindingCache,
}

impl Services {
    pub async fn new(
        store: Store,
        settings: Arc<Settings>,
        pool: Pool,
        cluster: Cluster,
        url_policy: Arc<UrlPolicy>,
    ) -> crate::error::Result<Self> {
        let events = Arc::new(EventHub::new(settings.events.replay_buffer));
        let bindings = BindingCache::new(store.clone(), cluster.clone());
        // Every client that dials a user-chosen URL: one TLS configuration, one resolver.
        let upstream_http = Arc::new(crate::mcp::UpstreamHttp::from_settings(
            &settings,
            url_policy.clone(),
        )?);
        let oauth = OAuthService::new(
            store.clone(),
            settings.clone(),
            &upstream_http,
            events.clone(),
            pool.clone(),
            cluster.clone(),
        );
        server_logs::relay(&pool, events.clone());
        let rate_limits = Arc::new(RateLimits::new(&settings.limits));
        let policies = Policies::load(store.clone(), pool.metrics().clone()).await?;
        let audit = AuditTrail::start(
            store.clone(),
            settings.audit.clone(),
            &settings.storage.data_dir,
            cluster.me(),
        );
        let park_limits = crate::services::ParkLimits {
            per_user: settings.elicitation.max_open_per_user as usize,
            per_server: settings.elicitation.max_open_per_server as usize,
        };
        let forwarder = crate::services::parked::forward::Forwarder::new(cluster.clone());
        let sampling = sampling::Sampling::new(
            events.clone(),
            crate::llm::LlmClient::new(&settings.llm),
            rate_limits.clone(),
            sampling::SamplingLimits {
                timeout: std::time::Duration::from_secs(settings.sampling.timeout_secs),
                parked: park_limits,
                max_tokens: settings.llm.max_tokens,
                max_prompt_bytes: settings.sampling.max_prompt_bytes as usize,
            },
            forwarder.clone(),
        )
        .counted_by(policies.clone());
        let elicitations = elicitations::Elicitations::new(
            events.clone(),
            std::time::Duration::from_secs(settings.elicitation.timeout_secs),
            park_limits,
            sampling.clone(),
            forwarder.clone(),
        );
        let catalog = CatalogService::new(store.clone(), settings.clone())
            .restarting(pool.clone(), cluster.clone());
        let upstream = UpstreamService::new(
            store.clone(),
            settings.clone(),
            upstream_http,
            pool.clone(),
            Arc::new(GlobalServers::default()),
            bindings.clone(),
            upstream::UserFacing {
                oauth: oauth.clone(),
                elicitations: elicitations.clone(),
                rate_limits,
                audit: audit.clone(),
                catalog: catalog.clone(),
                policies: policies.clone(),
            },
        )
        .await?;
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
        let tasks = Tasks::new(
            store.clone(),
            events.clone(),
            cluster.clone(),
            settings.tasks.clone(),
        );
        let gateway = GatewayService::new(
            store.clone(),
            settings.clone(),
            upstream.clone(),
            confirmations.clone(),
            bindings.clone(),
            tasks.clone(),
            oauth.clone(),
        );
        let xiaozhi = XiaozhiBridges::new(
            gateway.clone(),
            store.clone(),
            settings.clone(),
            url_policy.clone(),
            cluster.clone(),
        );
        let operators = OperatorService::new(
            store.clone(),
            cluster.clone(),
            audit.clone(),
            upstream.clone(),
        );
        // A round unanswered for the elicitation timeout is dropped; a retry handed to the
        // instance holding it waits for the call's next question or end, as long as a call
        // may run.
        let rounds = crate::gateway::rounds::Rounds::in_cluster(
            std::time::Duration::from_secs(settings.elicitation.timeout_secs),
            cluster.clone(),
            std::time::Duration::from_secs(settings.pool.max_call_timeout_secs.into()),
        );
        Ok(Self {
            rounds,
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
            )
            .audited_by(audit.clone())
            .governed_by(policies.clone()),
            oauth,
            elicitations,
            sampling,
            tool_calls: ToolCallService::new(
                store.clone(),
                settings.clone(),
                upstream.clone(),
                confirmations.clone(),
                audit.clone(),
            ),
            upstream,
            audit,
            confirmations,
            tasks,
            events,
            pool,
            cluster,
            forwarder,
            assistants: AssistantService::new(store.clone(), settings.clone(), bindings.clone()),
            bindings,
            presets: PresetService::new(store.clone(), settings.clone()),
            catalog,
            policies,
            keys: KeyService::new(store.clone(), &settings),
            operators,
            store,
        })
    }
}
