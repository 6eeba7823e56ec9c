//! `ConnectionActor`: owns one (user, server) MCP session and its state machine.
//!
//! States: disconnected → connecting → connected, and → error(reason) on a failed connect
//! or a broken session. Connecting runs in a task that reports back, so the mailbox keeps
//! answering while a server starts. Callers get a [`Lease`] (a clone of the session
//! handle) and make their requests outside the actor. After a failed connect the next
//! attempt waits a jittered exponential backoff (1 s → 60 s); a session that broke after
//! working is reconnected on the very next use. Unused for `idle_timeout`, the actor
//! stops itself and its session (and child process) is closed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{
    Catalogs, ConnectionActivity, ConnectionKey, ConnectionState, Lease, PoolError, ServerRuntime,
    SessionSlot, StatusCell,
};
use crate::mcp::{self, McpClient, McpError, UpstreamEvents};
use crate::metrics::Metrics;

/// How long a stopping actor lets its session close politely before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// How long a stop during calls waits for the session's process to be gone (its group
/// gets a grace after EOF and after TERM, then KILL).
const STOP_WAIT: Duration = Duration::from_secs(6);
/// What calls cut short by a stop fail with.
const STOPPED_DURING_CALL: &str = "the connection was stopped while the request ran (its server was deleted or changed, or an admin stopped it)";

pub enum ConnectionMsg {
    /// Give me a session, connecting first if needed. `span` is the asker's (its request
    /// id), so a connect it triggers logs under that request.
    Acquire {
        reply: RpcReplyPort<Result<Lease, PoolError>>,
        span: tracing::Span,
    },
    /// The connect task finished attempt `generation`.
    Connected {
        generation: u64,
        result: Result<Arc<McpClient>, McpError>,
    },
    /// A caller saw session `generation` break.
    Failed {
        generation: u64,
        reason: String,
    },
    /// The upstream announced a change.
    Upstream(UpstreamEvents),
    /// Forget the backoff: the next use may connect at once.
    Refresh,
    IdleCheck,
}

pub struct ConnectionArgs {
    pub key: ConnectionKey,
    pub runtime: Arc<ServerRuntime>,
    pub status: Arc<StatusCell>,
    /// Where callers find the live session without a message.
    pub slot: Arc<SessionSlot>,
    pub catalogs: Arc<Catalogs>,
    pub metrics: Arc<Metrics>,
    pub idle_timeout: Duration,
    pub activity: ConnectionActivity,
}

enum Phase {
    Disconnected,
    Connecting {
        waiters: Vec<RpcReplyPort<Result<Lease, PoolError>>>,
    },
    Connected {
        client: Arc<McpClient>,
    },
    Failed {
        reason: String,
        retry_at: Instant,
        /// The server asked for the user's authorization: the answer until the next try.
        auth: Option<McpError>,
    },
}

/// How soon a server that asked for authorization is tried again: the user may have
/// authorized it meanwhile (possibly on another instance), and a try is one round trip.
const AUTH_RETRY: Duration = Duration::from_secs(2);

pub struct ConnectionStateData {
    key: ConnectionKey,
    runtime: Arc<ServerRuntime>,
    status: Arc<StatusCell>,
    catalogs: Arc<Catalogs>,
    metrics: Arc<Metrics>,
    idle_timeout: Duration,
    activity: ConnectionActivity,
    phase: Phase,
    /// Bumped per connect attempt, so late reports about an old session are ignored.
    generation: u64,
    backoff: Box<dyn Iterator<Item = Duration> + Send>,
    slot: Arc<SessionSlot>,
    idle_timer: Option<JoinHandle<()>>,
}

fn new_backoff() -> Box<dyn Iterator<Item = Duration> + Send> {
    Box::new(
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(Duration::from_secs(60))
            .with_jitter()
            .without_max_times()
            .build(),
    )
}

pub struct ConnectionActor;

impl ConnectionStateData {
    fn set_status(&self, state: ConnectionState, error: Option<String>) {
        let mut status = self.status.lock().expect("status lock");
        if status.state != state || error.is_some() {
            if status.history.len() == super::STATE_HISTORY {
                status.history.pop_front();
            }
            status.history.push_back(super::StateChange {
                state,
                at: crate::domain::now(),
                cause: error.clone(),
            });
        }
        status.state = state;
        if error.is_some() {
            status.last_error = error;
        }
        status.process_group = None;
        status.limits = Default::default();
        if let (ConnectionState::Connected, Phase::Connected { client }) = (state, &self.phase) {
            status.connected_at = Some(crate::domain::now());
            let info = client.server_info();
            status.server_name = info.as_ref().map(|i| i.name.clone());
            status.server_version = info.map(|i| i.version);
            status.process_group = client.process_group();
            status.limits = client.stdio_limits();
        }
        drop(status);
        self.activity.announce(&self.key);
    }

    fn lease(&self, myself: &ActorRef<ConnectionMsg>, client: &Arc<McpClient>) -> Lease {
        Lease {
            client: client.clone(),
            runtime: self.runtime.clone(),
            key: self.key.clone(),
            actor: myself.clone(),
            generation: self.generation,
        }
    }

    fn start_connect(
        &mut self,
        myself: &ActorRef<ConnectionMsg>,
        first_waiter: RpcReplyPort<Result<Lease, PoolError>>,
        span: tracing::Span,
    ) {
        self.generation += 1;
        self.phase = Phase::Connecting {
            waiters: vec![first_waiter],
        };
        self.set_status(ConnectionState::Connecting, None);
        let generation = self.generation;
        let upstream = self.runtime.upstream.clone();
        let me = myself.clone();
        let key = self.key.clone();
        let catalogs = self.catalogs.clone();
        let connect = async move {
            let (events, mut incoming) = mpsc::unbounded_channel();
            let result = mcp::connect(&upstream, events).await.map(Arc::new);
            if result.is_ok() {
                tracing::info!(user = %key.user, server = %key.server, upstream = ?upstream.transport, "MCP connection established");
                let forward_to = me.clone();
                let (catalogs, key) = (catalogs.clone(), key.clone());
                tokio::spawn(async move {
                    while let Some(event) = incoming.recv().await {
                        // Notices go straight to their listeners, in the order they came.
                        if matches!(
                            event,
                            UpstreamEvents::Log(_) | UpstreamEvents::ResourceUpdated(_)
                        ) {
                            catalogs.announce(&key, event);
                            continue;
                        }
                        if forward_to.cast(ConnectionMsg::Upstream(event)).is_err() {
                            break;
                        }
                    }
                });
            }
            // If the actor is gone the session is dropped here, killing any child.
            let _ = me.cast(ConnectionMsg::Connected { generation, result });
        };
        tokio::spawn(tracing::Instrument::instrument(connect, span));
    }

    fn mark_failed(&mut self, reason: String, retry_in: Duration) {
        self.slot.set(None);
        tracing::warn!(user = %self.key.user, server = %self.key.server, %reason, "MCP connection failed");
        self.phase = Phase::Failed {
            reason: reason.clone(),
            retry_at: Instant::now() + retry_in,
            auth: None,
        };
        self.set_status(ConnectionState::Error, Some(reason));
    }

    fn mark_auth_required(&mut self, error: &McpError) {
        self.slot.set(None);
        tracing::info!(user = %self.key.user, server = %self.key.server, "the MCP server asks for the user's authorization");
        self.phase = Phase::Failed {
            reason: error.to_string(),
            retry_at: Instant::now() + AUTH_RETRY,
            auth: Some(error.clone()),
        };
        self.set_status(ConnectionState::AuthRequired, Some(error.to_string()));
    }
}

impl Actor for ConnectionActor {
    type Msg = ConnectionMsg;
    type State = ConnectionStateData;
    type Arguments = ConnectionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ConnectionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let check_every =
            (args.idle_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(30));
        let idle_timer = myself.send_interval(check_every, || ConnectionMsg::IdleCheck);
        Ok(ConnectionStateData {
            key: args.key,
            runtime: args.runtime,
            status: args.status,
            catalogs: args.catalogs,
            metrics: args.metrics,
            idle_timeout: args.idle_timeout,
            activity: args.activity,
            phase: Phase::Disconnected,
            generation: 0,
            backoff: new_backoff(),
            slot: {
                args.slot.touch();
                args.slot
            },
            idle_timer: Some(idle_timer),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ConnectionMsg::Acquire { reply, span } => {
                state.slot.touch();
                match &mut state.phase {
                    Phase::Connected { client } if !client.is_closed() => {
                        let client = client.clone();
                        let _ = reply.send(Ok(state.lease(&myself, &client)));
                    }
                    Phase::Connected { client } => {
                        // The session died between uses: reconnect transparently, with
                        // why it ended (a stdio server's exit) in the history.
                        if let Some(cause) = client.exit_cause() {
                            state.set_status(ConnectionState::Error, Some(cause));
                        }
                        state.slot.set(None);
                        state.catalogs.invalidate(&state.key).await;
                        state.start_connect(&myself, reply, span);
                    }
                    Phase::Connecting { waiters } => waiters.push(reply),
                    Phase::Disconnected => state.start_connect(&myself, reply, span),
                    Phase::Failed {
                        reason,
                        retry_at,
                        auth,
                    } => {
                        let now = Instant::now();
                        if now >= *retry_at {
                            state.start_connect(&myself, reply, span);
                        } else if let Some(auth) = auth {
                            let _ = reply.send(Err(PoolError::Upstream(auth.clone())));
                        } else {
                            let _ = reply.send(Err(PoolError::Backoff {
                                reason: reason.clone(),
                                retry_in: *retry_at - now,
                            }));
                        }
                    }
                }
            }
            ConnectionMsg::Connected { generation, result } => {
                if generation != state.generation {
                    return Ok(());
                }
                let waiters = match std::mem::replace(&mut state.phase, Phase::Disconnected) {
                    Phase::Connecting { waiters } => waiters,
                    other => {
                        state.phase = other;
                        return Ok(());
                    }
                };
                state.metrics.upstream_connect(
                    state.runtime.server.spec.transport.kind().as_str(),
                    state.generation > 1,
                    result.is_ok(),
                );
                match result {
                    Ok(client) => {
                        state.backoff = new_backoff();
                        state.phase = Phase::Connected {
                            client: client.clone(),
                        };
                        // From now on callers lease from the slot, without a message.
                        state.slot.set(Some((client.clone(), state.generation)));
                        state.set_status(ConnectionState::Connected, None);
                        for waiter in waiters {
                            let _ = waiter.send(Ok(state.lease(&myself, &client)));
                        }
                    }
                    Err(error @ McpError::AuthRequired(_)) => {
                        state.mark_auth_required(&error);
                        for waiter in waiters {
                            let _ = waiter.send(Err(PoolError::Upstream(error.clone())));
                        }
                    }
                    Err(error) => {
                        let retry_in = state.backoff.next().unwrap_or(Duration::from_secs(60));
                        state.mark_failed(error.to_string(), retry_in);
                        for waiter in waiters {
                            let _ = waiter.send(Err(PoolError::Upstream(error.clone())));
                        }
                    }
                }
            }
            ConnectionMsg::Failed { generation, reason } => {
                if generation == state.generation && matches!(state.phase, Phase::Connected { .. })
                {
                    state.catalogs.invalidate(&state.key).await;
                    // It worked before: the next use reconnects without waiting.
                    state.mark_failed(reason, Duration::ZERO);
                }
            }
            ConnectionMsg::Upstream(event) => match event {
                UpstreamEvents::ToolsChanged => state.catalogs.invalidate_tools(&state.key).await,
                UpstreamEvents::ResourcesChanged | UpstreamEvents::PromptsChanged => {
                    state.catalogs.invalidate(&state.key).await;
                    state.catalogs.announce(&state.key, event);
                }
                UpstreamEvents::Log(_) | UpstreamEvents::ResourceUpdated(_) => {
                    state.catalogs.announce(&state.key, event)
                }
            },
            ConnectionMsg::Refresh => {
                state.backoff = new_backoff();
                if let Phase::Failed { retry_at, .. } = &mut state.phase {
                    *retry_at = Instant::now();
                }
            }
            ConnectionMsg::IdleCheck => {
                let busy = match &state.phase {
                    Phase::Connecting { .. } => true,
                    // Leases still held mean calls in flight.
                    // One reference is ours and one the slot's; more are leases in use.
                    Phase::Connected { client } => Arc::strong_count(client) > 2,
                    _ => false,
                };
                let idle_ms = crate::pool::unix_millis() - state.slot.last_used_ms();
                if !busy && idle_ms >= state.idle_timeout.as_millis() as i64 {
                    state.slot.set(None);
                    tracing::debug!(user = %state.key.user, server = %state.key.server, "idle: closing the connection");
                    myself.stop(Some("idle".into()));
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(timer) = state.idle_timer.take() {
            timer.abort();
        }
        state.slot.set(None);
        // An idle user's tool lists would otherwise outlive the session by the cache TTL.
        state.catalogs.forget(&state.key).await;
        match std::mem::replace(&mut state.phase, Phase::Disconnected) {
            Phase::Connected { client } => match Arc::try_unwrap(client) {
                Ok(mut client) => client.close(CLOSE_GRACE).await,
                // Calls still hold it: a stop is now (its process ended before the stop
                // is answered), and they fail saying so.
                Err(shared) => shared.end_now(STOPPED_DURING_CALL, STOP_WAIT).await,
            },
            Phase::Connecting { waiters } => {
                for waiter in waiters {
                    let _ = waiter.send(Err(PoolError::Stopped));
                }
            }
            _ => {}
        }
        state.set_status(ConnectionState::Disconnected, None);
        Ok(())
    }
}
