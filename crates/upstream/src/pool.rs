//! The connection pool: one supervised actor per (user, server) owning a live MCP session.
//!
//! `Pool` is the façade services use. A call looks the actor up in a shared registry
//! (no message on the fast path), asks it for a [`Lease`] — a clone of its session handle —
//! and runs the request on that handle outside the actor, so a slow tool never blocks the
//! next call on the same connection. Spawning goes through the [`supervisor`] so two
//! concurrent first uses cannot create two actors. Tool, resource and prompt lists are
//! cached per connection in [`catalog`].

mod catalog;
mod connection;
mod supervisor;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorRef};
use uuid::Uuid;

pub use catalog::{Catalogs, ResourceCatalog, ToolCatalog, UpstreamNotice, schema_problems};
use connection::ConnectionMsg;
use supervisor::{PoolSupervisor, SupervisorArgs, SupervisorMsg};

use crate::actors::is_alive;
use crate::config::PoolSettings;
use crate::domain::{McpServer, TransportKind, UserId};
use crate::mcp::{McpClient, McpError, UpstreamSpec};
use crate::metrics::{ConnectionCensus, Metrics};

/// Failures of the pool itself, or of the upstream seen through it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Upstream(#[from] McpError),
    /// The last connection attempt failed; the next one is allowed after `retry_in`.
    #[error("the MCP server is unreachable ({reason}); next attempt in {}s", retry_in.as_secs().max(1))]
    Backoff { reason: String, retry_in: Duration },
    #[error("a user may hold at most {0} live MCP connections")]
    TooManyConnections(u32),
    #[error("the service runs at most {0} stdio MCP servers at once")]
    TooManyProcesses(u32),
    #[error("the connection was stopped")]
    Stopped,
    #[error("the connection pool is not answering: {0}")]
    Internal(String),
}

/// Identifies one connection actor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectionKey {
    pub user: UserId,
    pub server: Uuid,
    /// The conversation or gateway session that has a session of its own (servers whose
    /// `sessionScope` is `conversation`); `None` for the user's shared session.
    pub scope: Option<Arc<str>>,
    /// A second session in 2025-11-25 beside the newest one of a server that speaks both,
    /// for clients of that revision.
    pub revision: crate::mcp::SessionRevision,
}

impl ConnectionKey {
    /// The session `user`'s callers share.
    pub fn shared(user: UserId, server: Uuid) -> Self {
        Self {
            user,
            server,
            scope: None,
            revision: crate::mcp::SessionRevision::Newest,
        }
    }
}

/// What an actor needs to run one server: its definition and how to reach it.
#[derive(Debug)]
pub struct ServerRuntime {
    pub server: McpServer,
    pub upstream: UpstreamSpec,
    /// Per-request timeout (the server's own, else the configured default).
    pub call_timeout: Duration,
}

impl ServerRuntime {
    /// The same server, opened in `revision`.
    pub fn in_revision(&self, revision: crate::mcp::SessionRevision) -> Arc<ServerRuntime> {
        let mut upstream = self.upstream.clone();
        upstream.revision = revision;
        Arc::new(ServerRuntime {
            server: self.server.clone(),
            upstream,
            call_timeout: self.call_timeout,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    Disconnected,
    Connecting,
    Connected,
    Error,
    /// The server asks for the user's OAuth authorization.
    AuthRequired,
}

impl ConnectionState {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Disconnected => "disconnected",
            ConnectionState::Connecting => "connecting",
            ConnectionState::Connected => "connected",
            ConnectionState::Error => "error",
            ConnectionState::AuthRequired => "auth_required",
        }
    }
}

/// An actor's state as others may read it, updated by the actor only.
#[derive(Debug, Clone)]
pub struct ConnectionStatus {
    pub state: ConnectionState,
    pub connected_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    /// The last [`STATE_HISTORY`] changes of state, oldest first: why a connection broke
    /// and how often, without the service log.
    pub history: std::collections::VecDeque<StateChange>,
    /// A connected stdio server's process group, to tell what it runs
    /// ([`crate::mcp::group_usage`]).
    pub process_group: Option<i32>,
    /// A connected stdio server's limits, as its cgroup enforces them.
    pub limits: crate::mcp::StdioLimits,
}

/// How many state changes a connection keeps.
pub const STATE_HISTORY: usize = 20;

/// One change of a connection's state.
#[derive(Debug, Clone)]
pub struct StateChange {
    pub state: ConnectionState,
    pub at: DateTime<Utc>,
    /// Why, in words, when it failed.
    pub cause: Option<String>,
}

impl ConnectionStatus {
    pub fn new() -> Self {
        Self {
            state: ConnectionState::Disconnected,
            connected_at: None,
            last_error: None,
            server_name: None,
            server_version: None,
            history: std::collections::VecDeque::new(),
            process_group: None,
            limits: Default::default(),
        }
    }
}

impl Default for ConnectionStatus {
    fn default() -> Self {
        Self::new()
    }
}

pub type StatusCell = Mutex<ConnectionStatus>;

pub(crate) fn unix_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The live session of a connection, readable without messaging its actor: most calls
/// take their lease here (one read lock, no cross-task wake-up). Written by the actor only.
#[derive(Default)]
pub(crate) struct SessionSlot {
    current: RwLock<Option<(Arc<McpClient>, u64)>>,
    last_used_ms: std::sync::atomic::AtomicI64,
}

impl SessionSlot {
    fn set(&self, session: Option<(Arc<McpClient>, u64)>) {
        *self.current.write().expect("slot lock") = session;
    }

    fn touch(&self) {
        self.last_used_ms
            .store(unix_millis(), std::sync::atomic::Ordering::Relaxed);
    }

    fn last_used_ms(&self) -> i64 {
        self.last_used_ms.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The session with its generation, if it is connected and not closed.
    fn current(&self) -> Option<(Arc<McpClient>, u64)> {
        self.current
            .read()
            .expect("slot lock")
            .as_ref()
            .filter(|(client, _)| !client.is_closed())
            .cloned()
    }
}

/// One registry row: the actor, its status and what it runs.
#[derive(Clone)]
pub(crate) struct RegistryEntry {
    pub actor: ActorRef<ConnectionMsg>,
    pub status: Arc<StatusCell>,
    pub slot: Arc<SessionSlot>,
    pub runtime: Arc<ServerRuntime>,
}

/// Tells watchers (the console's live view) which connection changed state, appeared or
/// went. A lagging watcher skips notes, never blocks the actors.
#[derive(Clone)]
pub(crate) struct ConnectionActivity(tokio::sync::broadcast::Sender<ConnectionKey>);

impl Default for ConnectionActivity {
    fn default() -> Self {
        Self(tokio::sync::broadcast::channel(1024).0)
    }
}

impl ConnectionActivity {
    pub fn announce(&self, key: &ConnectionKey) {
        if self.0.receiver_count() > 0 {
            let _ = self.0.send(key.clone());
        }
    }
}

/// Shared map of live actors. Read on every call, written by the supervisor and `stop`.
#[derive(Default)]
pub struct Registry {
    entries: RwLock<HashMap<ConnectionKey, RegistryEntry>>,
    pub(crate) activity: ConnectionActivity,
}

impl Registry {
    fn get(&self, key: &ConnectionKey) -> Option<RegistryEntry> {
        self.entries
            .read()
            .expect("registry lock")
            .get(key)
            .cloned()
    }

    fn insert(&self, key: ConnectionKey, entry: RegistryEntry) {
        self.entries
            .write()
            .expect("registry lock")
            .insert(key.clone(), entry);
        self.activity.announce(&key);
    }

    /// Removes the entry only if it still belongs to `actor` (a newer one may have replaced it).
    fn remove_if(&self, key: &ConnectionKey, actor: ractor::ActorId) {
        let mut entries = self.entries.write().expect("registry lock");
        if entries.get(key).is_some_and(|e| e.actor.get_id() == actor) {
            entries.remove(key);
            drop(entries);
            self.activity.announce(key);
        }
    }

    fn take(&self, key: &ConnectionKey) -> Option<RegistryEntry> {
        let taken = self.entries.write().expect("registry lock").remove(key);
        if taken.is_some() {
            self.activity.announce(key);
        }
        taken
    }

    fn keys_where(&self, wanted: impl Fn(&ConnectionKey) -> bool) -> Vec<ConnectionKey> {
        self.entries
            .read()
            .expect("registry lock")
            .keys()
            .filter(|key| wanted(key))
            .cloned()
            .collect()
    }

    fn snapshot(&self) -> Vec<(ConnectionKey, RegistryEntry)> {
        self.entries
            .read()
            .expect("registry lock")
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }
}

/// A usable session handle, valid until the caller drops it.
pub struct Lease {
    pub client: Arc<McpClient>,
    pub runtime: Arc<ServerRuntime>,
    pub key: ConnectionKey,
    actor: ActorRef<ConnectionMsg>,
    generation: u64,
}

/// A connection as the admin API shows it.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub key: ConnectionKey,
    /// Last lease taken, kept by the session slot.
    pub last_active_at: DateTime<Utc>,
    pub server_name: String,
    pub transport: &'static str,
    pub status: ConnectionStatus,
}

/// Live connections counted by state and by transport (`/admin/stats`, `/metrics`).
pub fn census(connections: &[ConnectionInfo]) -> ConnectionCensus {
    let mut census = ConnectionCensus {
        total: connections.len(),
        ..ConnectionCensus::default()
    };
    for connection in connections {
        *match connection.status.state {
            ConnectionState::Disconnected => &mut census.disconnected,
            ConnectionState::Connecting => &mut census.connecting,
            ConnectionState::Connected => &mut census.connected,
            ConnectionState::Error => &mut census.error,
            ConnectionState::AuthRequired => &mut census.auth_required,
        } += 1;
        if connection.transport == TransportKind::Stdio.as_str() {
            census.stdio += 1;
        }
    }
    census
}

#[derive(Clone)]
pub struct Pool {
    supervisor: ActorRef<SupervisorMsg>,
    registry: Arc<Registry>,
    catalogs: Arc<Catalogs>,
    settings: Arc<PoolSettings>,
    metrics: Arc<Metrics>,
}

impl Pool {
    pub async fn start(settings: PoolSettings, metrics: Arc<Metrics>) -> Result<Self, PoolError> {
        crate::mcp::prepare_containment(
            settings.stdio_memory_limit_mib > 0,
            settings.stdio_max_tasks_per_server > 0,
        );
        let settings = Arc::new(settings);
        let registry = Arc::new(Registry::default());
        let catalogs = Arc::new(Catalogs::new(
            Duration::from_secs(settings.tool_cache_ttl_secs),
            metrics.clone(),
        ));
        let (supervisor, _) = Actor::spawn(
            None,
            PoolSupervisor,
            SupervisorArgs {
                registry: registry.clone(),
                catalogs: catalogs.clone(),
                settings: settings.clone(),
                metrics: metrics.clone(),
            },
        )
        .await
        .map_err(|e| PoolError::Internal(e.to_string()))?;
        Ok(Self {
            supervisor,
            registry,
            catalogs,
            settings,
            metrics,
        })
    }

    /// A session for `key`, connecting (or reconnecting) if needed. `load` builds the
    /// runtime from storage and runs only when no actor exists yet.
    pub async fn lease<E, F, Fut>(&self, key: &ConnectionKey, load: F) -> Result<Lease, E>
    where
        E: From<PoolError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<ServerRuntime>, E>>,
    {
        if let Some(entry) = self.registry.get(key)
            && let Some((client, generation)) = entry.slot.current()
        {
            entry.slot.touch();
            return Ok(Lease {
                client,
                runtime: entry.runtime,
                key: key.clone(),
                actor: entry.actor,
                generation,
            });
        }
        // Boxed: a call on a live connection (the common case) then carries a pointer, not
        // the kilobytes of a connect in its future, which every task spawn and move copies.
        Box::pin(self.lease_through_actor(key, load)).await
    }

    /// A lease from the connection's actor, started (with `load`'s runtime) if need be.
    async fn lease_through_actor<E, F, Fut>(&self, key: &ConnectionKey, load: F) -> Result<Lease, E>
    where
        E: From<PoolError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<ServerRuntime>, E>>,
    {
        let mut load = Some(load);
        let mut loaded: Option<Arc<ServerRuntime>> = None;
        let acquire_timeout = Duration::from_secs(self.settings.connect_timeout_secs + 5);
        // A stopped actor can linger in the registry for an instant: try again then.
        for _ in 0..3 {
            let actor = match self.registry.get(key) {
                Some(entry) if is_alive(&entry.actor) => entry.actor,
                _ => {
                    let runtime = match (&loaded, load.take()) {
                        (Some(runtime), _) => runtime.clone(),
                        (None, Some(load)) => {
                            let runtime = load().await?;
                            loaded = Some(runtime.clone());
                            runtime
                        }
                        (None, None) => unreachable!("load runs before loaded is empty"),
                    };
                    self.spawn(key, runtime).await?
                }
            };
            match actor
                .call(
                    |reply| ConnectionMsg::Acquire {
                        reply,
                        span: tracing::Span::current(),
                    },
                    Some(acquire_timeout),
                )
                .await
            {
                Ok(ractor::rpc::CallResult::Success(result)) => return result.map_err(E::from),
                Ok(ractor::rpc::CallResult::Timeout) => {
                    return Err(PoolError::Internal("the connection did not answer".into()).into());
                }
                Ok(ractor::rpc::CallResult::SenderError) | Err(_) => continue,
            }
        }
        Err(PoolError::Stopped.into())
    }

    async fn spawn(
        &self,
        key: &ConnectionKey,
        runtime: Arc<ServerRuntime>,
    ) -> Result<ActorRef<ConnectionMsg>, PoolError> {
        let reply = self
            .supervisor
            .call(
                |reply| SupervisorMsg::Spawn {
                    key: key.clone(),
                    runtime,
                    reply,
                },
                Some(Duration::from_secs(10)),
            )
            .await
            .map_err(|e| PoolError::Internal(e.to_string()))?;
        match reply {
            ractor::rpc::CallResult::Success(result) => result,
            _ => Err(PoolError::Internal(
                "the pool supervisor did not answer".into(),
            )),
        }
    }

    /// The instance's metrics (recorded by the pool, its actors and its callers).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Tells the actor its session broke, so the next use reconnects.
    pub fn report(&self, lease: &Lease, error: &McpError) {
        if error.is_connection_failure() || lease.client.is_closed() {
            let _ = lease.actor.cast(ConnectionMsg::Failed {
                generation: lease.generation,
                reason: error.to_string(),
            });
        }
    }

    pub async fn tools(&self, lease: &Lease) -> Result<Arc<ToolCatalog>, PoolError> {
        let result = self.catalogs.tools(lease).await;
        self.report_result(lease, &result);
        result
    }

    pub async fn resources(&self, lease: &Lease) -> Result<Arc<ResourceCatalog>, PoolError> {
        let result = self.catalogs.resources(lease).await;
        self.report_result(lease, &result);
        result
    }

    pub async fn prompts(&self, lease: &Lease) -> Result<Arc<Vec<rmcp::model::Prompt>>, PoolError> {
        let result = self.catalogs.prompts(lease).await;
        self.report_result(lease, &result);
        result
    }

    fn report_result<T>(&self, lease: &Lease, result: &Result<T, PoolError>) {
        if let Err(PoolError::Upstream(error)) = result {
            self.report(lease, error);
        }
    }

    /// Keys of connections that changed state, started or stopped.
    pub fn subscribe_activity(&self) -> tokio::sync::broadcast::Receiver<ConnectionKey> {
        self.registry.activity.0.subscribe()
    }

    /// Keys of connections whose cached lists were just dropped.
    pub fn subscribe_changes(&self) -> tokio::sync::broadcast::Receiver<ConnectionKey> {
        self.catalogs.subscribe_changes()
    }

    /// Servers' log messages and resource updates, from every connection.
    pub fn subscribe_notices(&self) -> tokio::sync::broadcast::Receiver<Arc<UpstreamNotice>> {
        self.catalogs.subscribe_notices()
    }

    /// Forgets cached lists of one connection.
    pub async fn invalidate(&self, key: &ConnectionKey) {
        self.catalogs.invalidate(key).await;
    }

    /// Stops every connection of `user` to `server`, each conversation's included, e.g.
    /// after the server's definition changed. `false` when there was none.
    /// A team server's owner stops every member's connections to it.
    pub async fn stop_server(&self, user: &UserId, server: Uuid) -> bool {
        let team = user.team_group().is_some();
        let keys = self
            .registry
            .keys_where(|key| key.server == server && (team || key.user == *user));
        let mut stopped = false;
        for key in keys {
            stopped |= self.stop(&key).await;
        }
        stopped
    }

    /// Stops the connections of one conversation or gateway session (it ended).
    pub async fn stop_scope(&self, user: &UserId, scope: &str) -> usize {
        let keys = self
            .registry
            .keys_where(|key| key.user == *user && key.scope.as_deref() == Some(scope));
        let mut stopped = 0;
        for key in keys {
            stopped += usize::from(self.stop(&key).await);
        }
        stopped
    }

    /// What the live connection of `key` runs, without connecting.
    pub fn runtime_of(&self, key: &ConnectionKey) -> Option<Arc<ServerRuntime>> {
        self.registry.get(key).map(|entry| entry.runtime)
    }

    /// Stops the connection (its child process is killed) and forgets its caches.
    /// `false` when there was none.
    async fn stop(&self, key: &ConnectionKey) -> bool {
        self.catalogs.invalidate(key).await;
        match self.registry.take(key) {
            Some(entry) => {
                let _ = entry
                    .actor
                    .stop_and_wait(Some("stopped".into()), Some(Duration::from_secs(10)))
                    .await;
                true
            }
            None => false,
        }
    }

    /// Drops cached lists and lifts any reconnect backoff; `false` when no connection exists.
    pub async fn refresh(&self, key: &ConnectionKey) -> bool {
        self.catalogs.invalidate(key).await;
        match self.registry.get(key) {
            Some(entry) => entry.actor.cast(ConnectionMsg::Refresh).is_ok(),
            None => false,
        }
    }

    pub fn connection(&self, key: &ConnectionKey) -> Option<ConnectionInfo> {
        self.registry
            .get(key)
            .map(|entry| info(key.clone(), &entry))
    }

    pub fn connections(&self) -> Vec<ConnectionInfo> {
        let mut all: Vec<ConnectionInfo> = self
            .registry
            .snapshot()
            .into_iter()
            .map(|(key, entry)| info(key, &entry))
            .collect();
        all.sort_by(|a, b| (&a.key.user, a.key.server).cmp(&(&b.key.user, b.key.server)));
        all
    }

    /// Stops every connection and waits for their processes to be killed.
    pub async fn shutdown(&self) {
        let _ = self
            .supervisor
            .stop_and_wait(Some("shutdown".into()), Some(Duration::from_secs(15)))
            .await;
    }
}

fn info(key: ConnectionKey, entry: &RegistryEntry) -> ConnectionInfo {
    let status = entry.status.lock().expect("status lock").clone();
    ConnectionInfo {
        key,
        last_active_at: DateTime::from_timestamp_millis(entry.slot.last_used_ms())
            .unwrap_or_else(crate::domain::now),
        server_name: entry.runtime.server.spec.name.as_str().to_owned(),
        transport: entry.runtime.server.spec.transport.kind().as_str(),
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_census_names_each_state_as_the_state_names_itself() {
        let states = [
            ConnectionState::Disconnected,
            ConnectionState::Connecting,
            ConnectionState::Connected,
            ConnectionState::Error,
            ConnectionState::AuthRequired,
        ];
        let labels = ConnectionCensus::default()
            .by_state()
            .map(|(label, _)| label);
        assert_eq!(labels, states.map(ConnectionState::as_str));
    }
}
