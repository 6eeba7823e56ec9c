//! `ConfirmationSupervisor`: opens one actor per message (never two), and restarts a
//! crashed one from the stored records.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use uuid::Uuid;

use super::actor::{ActorArgs, ConfirmMsg, ConfirmationActor};
use super::{ConfirmDeps, INTERRUPTED, Lookup, Registry, announce};
use crate::domain::{InstanceId, ToolCallStatus, UserId};
use crate::error::{Error, Resource, Result};

pub enum SupervisorMsg {
    Open {
        user: UserId,
        message: Uuid,
        /// Create the message when it does not exist yet (submitting calls).
        create: bool,
        reply: RpcReplyPort<Result<ActorRef<ConfirmMsg>>>,
    },
    /// Settles the open calls of a message whose instance stopped, unless an actor here
    /// holds it or another instance took it first; answers how many were settled.
    SettleOrphan {
        user: UserId,
        message: Uuid,
        live: Vec<InstanceId>,
        reply: RpcReplyPort<Result<usize>>,
    },
}

pub struct SupervisorArgs {
    pub registry: Arc<Registry>,
    pub deps: ConfirmDeps,
}

pub struct SupervisorState {
    registry: Arc<Registry>,
    deps: ConfirmDeps,
    children: HashMap<ActorId, (UserId, Uuid)>,
}

pub struct ConfirmationSupervisor;

impl SupervisorState {
    async fn open(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        user: UserId,
        message: Uuid,
        create: bool,
    ) -> Result<ActorRef<ConfirmMsg>> {
        match self.registry.lookup(&user, message) {
            Lookup::Mine(actor) => return Ok(actor),
            Lookup::Others => return Err(Error::NotFound(Resource::Message, message.to_string())),
            Lookup::Absent => {}
        }
        let repo = self.deps.store.messages();
        let (exists, records, scope) = match repo.get(&user, message).await? {
            Some(_) => {
                self.claim(&user, message).await?;
                // Read again after the claim: now nobody else can change the records.
                let stored = repo
                    .get(&user, message)
                    .await?
                    .ok_or_else(|| Error::NotFound(Resource::Message, message.to_string()))?;
                // A stored message's calls use its conversation's sessions.
                let scope = stored
                    .conversation_id
                    .map(|c| std::sync::Arc::from(c.to_string()));
                (true, stored.tool_calls, scope)
            }
            // Another user's message id answers exactly like a missing one. A new message
            // is inserted with this instance as its owner.
            None if create && !repo.exists(message).await? => (false, Vec::new(), None),
            None => return Err(Error::NotFound(Resource::Message, message.to_string())),
        };
        let args = ActorArgs {
            user: user.clone(),
            message,
            exists,
            records,
            scope,
            deps: self.deps.clone(),
        };
        let (actor, _) = Actor::spawn_linked(None, ConfirmationActor, args, myself.get_cell())
            .await
            .map_err(|e| {
                Error::Unexpected(anyhow::anyhow!("cannot start a confirmation actor: {e}"))
            })?;
        self.children
            .insert(actor.get_id(), (user.clone(), message));
        self.registry.insert(user, message, actor.clone());
        Ok(actor)
    }

    /// Makes this instance the writer of an existing message, unless a live other
    /// instance holds open calls of it.
    async fn claim(&self, user: &UserId, message: Uuid) -> Result<()> {
        let repo = self.deps.store.messages();
        let me = self.deps.cluster.me();
        if repo.claim(user, message, me, None).await? {
            return Ok(());
        }
        // Held by another instance; taken over only if that one is dead.
        let live = self.deps.cluster.live().await?;
        if repo.claim(user, message, me, Some(&live)).await? {
            return Ok(());
        }
        tracing::info!(%message, "the message's calls are held by another instance");
        Err(Error::HeldElsewhere)
    }

    async fn settle_orphan(
        &mut self,
        user: UserId,
        message: Uuid,
        live: &[InstanceId],
    ) -> Result<usize> {
        if matches!(self.registry.lookup(&user, message), Lookup::Mine(_)) {
            return Ok(0);
        }
        let repo = self.deps.store.messages();
        let me = self.deps.cluster.me();
        if !repo.claim(&user, message, me, Some(live)).await? {
            return Ok(0);
        }
        let Some(mut stored) = repo.get(&user, message).await? else {
            return Ok(0);
        };
        let mut settled = Vec::new();
        for (index, call) in stored.tool_calls.iter_mut().enumerate() {
            if call.status.is_open() {
                call.status = match call.status {
                    ToolCallStatus::Pending => ToolCallStatus::Cancelled,
                    _ => ToolCallStatus::Error,
                };
                call.response = serde_json::Value::String(INTERRUPTED.into());
                call.is_error = true;
                settled.push(index);
            }
        }
        if !settled.is_empty() {
            let records: Vec<_> = settled.iter().map(|&i| &stored.tool_calls[i]).collect();
            // Every open call is settled here: none is left open.
            if !repo
                .update_tool_calls(&user, message, &records, me, 0)
                .await?
            {
                return Ok(0);
            }
            for index in &settled {
                announce(&self.deps, &user, message, &stored.tool_calls[*index]);
            }
        }
        Ok(settled.len())
    }
}

impl Actor for ConfirmationSupervisor {
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
            deps: args.deps,
            children: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Open {
                user,
                message,
                create,
                reply,
            } => {
                let _ = reply.send(state.open(&myself, user, message, create).await);
            }
            SupervisorMsg::SettleOrphan {
                user,
                message,
                live,
                reply,
            } => {
                let _ = reply.send(state.settle_orphan(user, message, &live).await);
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
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                if let Some((_, message)) = state.children.remove(&cell.get_id()) {
                    state.registry.remove_if(message, cell.get_id());
                }
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                if let Some((user, message)) = state.children.remove(&cell.get_id()) {
                    state.registry.remove_if(message, cell.get_id());
                    tracing::error!(%message, %error, "confirmation actor crashed; restarting it from storage");
                    if let Err(e) = state.open(&myself, user, message, false).await {
                        tracing::error!(%message, error = %e, "could not restart a confirmation actor");
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself
            .stop_children_and_wait(Some("shutdown".into()), Some(Duration::from_secs(10)))
            .await;
        Ok(())
    }
}
