//! `ConfirmationSupervisor`: opens one actor per message (never two), and restarts a
//! crashed one from the stored records.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use uuid::Uuid;

use super::actor::{ActorArgs, ConfirmMsg, ConfirmationActor};
use super::{ConfirmDeps, INTERRUPTED, Lookup, Registry, announce};
use crate::actors::{Children, Ended, stop_children};
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
    /// A message read for its actor (see [`SupervisorState::open`]).
    Loaded {
        user: UserId,
        message: Uuid,
        create: bool,
        loaded: Result<Loaded>,
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
    children: Children<(UserId, Uuid)>,
    /// Messages being read for their actor, with who waits for it (and whether each may
    /// create the message).
    opening: HashMap<(UserId, Uuid), Vec<(bool, Opened)>>,
}

pub struct ConfirmationSupervisor;

/// What a message's actor starts from, read from the store off the supervisor's turn.
pub(crate) struct Loaded {
    exists: bool,
    records: Vec<crate::domain::ToolCallRecord>,
    origins: crate::store::CallOrigins,
    scope: Option<Arc<str>>,
}

type Opened = RpcReplyPort<Result<ActorRef<ConfirmMsg>>>;

impl SupervisorState {
    /// Answers at once when the actor is there; else reads the message in a task of its
    /// own (joined by any other `Open` of the same message meanwhile) and spawns the actor
    /// when that answers ([`SupervisorMsg::Loaded`]): a database that is slow or gone
    /// holds that message's callers, not every message's.
    fn open(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        user: UserId,
        message: Uuid,
        create: bool,
        reply: Opened,
    ) {
        match self.registry.lookup(&user, message) {
            Lookup::Mine(actor) => {
                let _ = reply.send(Ok(actor));
                return;
            }
            Lookup::Others => {
                let _ = reply.send(Err(Error::NotFound(Resource::Message, message.to_string())));
                return;
            }
            Lookup::Absent => {}
        }
        if let Some(waiting) = self.opening.get_mut(&(user.clone(), message)) {
            waiting.push((create, reply));
            return;
        }
        self.opening
            .insert((user.clone(), message), vec![(create, reply)]);
        self.start_loading(myself, user, message, create);
    }

    /// Reads the message in a task; [`SupervisorMsg::Loaded`] brings it back.
    fn start_loading(
        &self,
        myself: &ActorRef<SupervisorMsg>,
        user: UserId,
        message: Uuid,
        create: bool,
    ) {
        let (deps, myself) = (self.deps.clone(), myself.clone());
        tokio::spawn(async move {
            let loaded = load(&deps, &user, message, create).await;
            let _ = myself.cast(SupervisorMsg::Loaded {
                user,
                message,
                create,
                loaded,
            });
        });
    }

    /// Spawns the actor of a message just read and answers everyone waiting for it.
    async fn loaded(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        user: UserId,
        message: Uuid,
        create: bool,
        loaded: Result<Loaded>,
    ) {
        let waiting = self
            .opening
            .remove(&(user.clone(), message))
            .unwrap_or_default();
        let spawned = match loaded {
            Ok(loaded) => self.spawn(myself, user.clone(), message, loaded).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &spawned
            && waiting.is_empty()
        {
            tracing::error!(%message, error = %e, "could not restart a confirmation actor");
        }
        match spawned {
            Ok(actor) => {
                for (_, reply) in waiting {
                    let _ = reply.send(Ok(actor.clone()));
                }
            }
            Err(error) => {
                // The error goes to the first caller whose question was read; the others
                // ask again (one that may create the message, or after a passing fault).
                let mut error = Some(error);
                for (wants_create, reply) in waiting {
                    match error.take() {
                        Some(e) if wants_create == create => {
                            let _ = reply.send(Err(e));
                        }
                        taken => {
                            error = taken;
                            let _ = myself.cast(SupervisorMsg::Open {
                                user: user.clone(),
                                message,
                                create: wants_create,
                                reply,
                            });
                        }
                    }
                }
            }
        }
    }

    async fn spawn(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        user: UserId,
        message: Uuid,
        loaded: Loaded,
    ) -> Result<ActorRef<ConfirmMsg>> {
        let args = ActorArgs {
            user: user.clone(),
            message,
            exists: loaded.exists,
            records: loaded.records,
            origins: loaded.origins,
            scope: loaded.scope,
            deps: self.deps.clone(),
        };
        let actor = self
            .children
            .spawn(
                myself.get_cell(),
                (user.clone(), message),
                ConfirmationActor,
                args,
            )
            .await
            .map_err(|e| {
                Error::Unexpected(anyhow::anyhow!("cannot start a confirmation actor: {e}"))
            })?;
        self.registry.insert(user, message, actor.clone());
        Ok(actor)
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

/// Reads a message for its actor, claiming it for this instance when it exists.
async fn load(deps: &ConfirmDeps, user: &UserId, message: Uuid, create: bool) -> Result<Loaded> {
    let repo = deps.store.messages();
    match repo.get(user, message).await? {
        Some(_) => {
            claim(deps, user, message).await?;
            // Read again after the claim: now nobody else can change the records.
            let stored = repo
                .get(user, message)
                .await?
                .ok_or_else(|| Error::NotFound(Resource::Message, message.to_string()))?;
            Ok(Loaded {
                exists: true,
                records: stored.tool_calls,
                origins: stored.origins,
                // A stored message's calls use its conversation's sessions.
                scope: stored.conversation_id.map(|c| Arc::from(c.to_string())),
            })
        }
        // Another user's message id answers exactly like a missing one. A new message
        // is inserted with this instance as its owner.
        None if create && !repo.exists(message).await? => Ok(Loaded {
            exists: false,
            records: Vec::new(),
            origins: Default::default(),
            scope: None,
        }),
        None => Err(Error::NotFound(Resource::Message, message.to_string())),
    }
}

/// Makes this instance the writer of an existing message, unless a live other instance
/// holds open calls of it.
async fn claim(deps: &ConfirmDeps, user: &UserId, message: Uuid) -> Result<()> {
    let repo = deps.store.messages();
    let me = deps.cluster.me();
    if repo.claim(user, message, me, None).await? {
        return Ok(());
    }
    // Held by another instance; taken over only if that one is dead.
    let live = deps.cluster.live().await?;
    if repo.claim(user, message, me, Some(&live)).await? {
        return Ok(());
    }
    tracing::info!(%message, "the message's calls are held by another instance");
    Err(Error::HeldElsewhere)
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
            children: Children::default(),
            opening: HashMap::new(),
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
            } => state.open(&myself, user, message, create, reply),
            SupervisorMsg::Loaded {
                user,
                message,
                create,
                loaded,
            } => state.loaded(&myself, user, message, create, loaded).await,
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
        match state.children.ended(event) {
            Some((id, Ended::Stopped((_, message), _))) => {
                state.registry.remove_if(message, id);
            }
            Some((id, Ended::Crashed((user, message), error))) => {
                state.registry.remove_if(message, id);
                tracing::error!(%message, %error, "confirmation actor crashed; restarting it from storage");
                // Read off this turn like any opening, with nobody waiting yet.
                if let std::collections::hash_map::Entry::Vacant(opening) =
                    state.opening.entry((user.clone(), message))
                {
                    opening.insert(Vec::new());
                    state.start_loading(&myself, user, message, false);
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
