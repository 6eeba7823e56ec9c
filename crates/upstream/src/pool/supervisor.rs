//! `PoolSupervisor`: spawns connection actors (one per key, never two), enforces the
//! connection limits, restarts an actor that crashed and keeps the registry in step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::actors::{Children, Ended, stop_children};

use super::connection::{ConnectionActor, ConnectionArgs, ConnectionMsg};
use super::{
    Catalogs, ConnectionKey, ConnectionStatus, PoolError, Registry, RegistryEntry, ServerRuntime,
    SessionSlot,
};
use crate::config::PoolSettings;
use crate::domain::{TransportKind, UserId};
use crate::metrics::Metrics;

pub enum SupervisorMsg {
    Spawn {
        key: ConnectionKey,
        runtime: Arc<ServerRuntime>,
        reply: RpcReplyPort<Result<ActorRef<ConnectionMsg>, PoolError>>,
    },
}

pub struct SupervisorArgs {
    pub registry: Arc<Registry>,
    pub catalogs: Arc<Catalogs>,
    pub settings: Arc<PoolSettings>,
    pub metrics: Arc<Metrics>,
}

pub struct SupervisorState {
    registry: Arc<Registry>,
    catalogs: Arc<Catalogs>,
    settings: Arc<PoolSettings>,
    metrics: Arc<Metrics>,
    /// What each child runs, to restart it after a crash and to keep counts.
    children: Children<(ConnectionKey, Arc<ServerRuntime>)>,
    per_user: HashMap<UserId, u32>,
    stdio: u32,
}

pub struct PoolSupervisor;

fn is_stdio(runtime: &ServerRuntime) -> bool {
    runtime.server.spec.transport.kind() == TransportKind::Stdio
}

impl SupervisorState {
    async fn spawn_child(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        key: ConnectionKey,
        runtime: Arc<ServerRuntime>,
    ) -> Result<ActorRef<ConnectionMsg>, PoolError> {
        let status = Arc::new(Mutex::new(ConnectionStatus::new()));
        let slot = Arc::new(SessionSlot::default());
        let args = ConnectionArgs {
            key: key.clone(),
            runtime: runtime.clone(),
            status: status.clone(),
            slot: slot.clone(),
            catalogs: self.catalogs.clone(),
            metrics: self.metrics.clone(),
            idle_timeout: Duration::from_secs(self.settings.idle_timeout_secs),
            activity: self.registry.activity.clone(),
        };
        let actor = self
            .children
            .spawn(
                myself.get_cell(),
                (key.clone(), runtime.clone()),
                ConnectionActor,
                args,
            )
            .await
            .map_err(|e| PoolError::Internal(format!("cannot start a connection actor: {e}")))?;
        *self.per_user.entry(key.user.clone()).or_default() += 1;
        if is_stdio(&runtime) {
            self.stdio += 1;
        }
        self.registry.insert(
            key,
            RegistryEntry {
                actor: actor.clone(),
                status,
                slot,
                runtime,
            },
        );
        Ok(actor)
    }

    /// Forgets a child that ended: its counts and its registry entry.
    fn forget(&mut self, id: ActorId, key: &ConnectionKey, runtime: &ServerRuntime) {
        if let Some(count) = self.per_user.get_mut(&key.user) {
            *count -= 1;
            if *count == 0 {
                self.per_user.remove(&key.user);
            }
        }
        if is_stdio(runtime) {
            self.stdio -= 1;
        }
        self.registry.remove_if(key, id);
    }
}

impl Actor for PoolSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SupervisorState {
            registry: args.registry,
            catalogs: args.catalogs,
            settings: args.settings,
            metrics: args.metrics,
            children: Children::default(),
            per_user: HashMap::new(),
            stdio: 0,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Spawn {
                key,
                runtime,
                reply,
            } => {
                // Messages are handled one at a time: whoever asked first created it.
                if let Some(entry) = state.registry.get(&key)
                    && crate::actors::is_alive(&entry.actor)
                {
                    let _ = reply.send(Ok(entry.actor));
                    return Ok(());
                }
                let per_user_limit = state.settings.max_connections_per_user;
                let result =
                    if state.per_user.get(&key.user).copied().unwrap_or(0) >= per_user_limit {
                        Err(PoolError::TooManyConnections(per_user_limit))
                    } else if is_stdio(&runtime)
                        && state.stdio as usize + crate::mcp::stdio::extra_group_processes()
                            >= state.settings.max_stdio_processes as usize
                    {
                        Err(PoolError::TooManyProcesses(
                            state.settings.max_stdio_processes,
                        ))
                    } else {
                        state.spawn_child(&myself, key, runtime).await
                    };
                let _ = reply.send(result);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match state.children.ended(event) {
            Some((id, Ended::Stopped((key, runtime), reason))) => {
                state.forget(id, &key, &runtime);
                tracing::debug!(user = %key.user, server = %key.server, reason = ?reason, "connection actor stopped");
            }
            Some((id, Ended::Crashed((key, runtime), error))) => {
                state.forget(id, &key, &runtime);
                tracing::error!(user = %key.user, server = %key.server, %error, "connection actor crashed; restarting it");
                state.catalogs.invalidate(&key).await;
                if let Err(e) = state.spawn_child(&myself, key, runtime).await {
                    tracing::error!(error = %e, "could not restart a connection actor");
                }
            }
            None => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        stop_children(&myself).await;
        Ok(())
    }
}
