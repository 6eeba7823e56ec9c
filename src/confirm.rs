//! Tool calls awaiting the user's approval: one `ConfirmationActor` per message.
//!
//! The actor is the only writer of its message's ToolCallRecords while any call is open:
//! every change is written to the database, then announced on the user's event stream.
//! Auto-approved calls run at once; others are parked until approved, rejected or timed
//! out. Calls execute in tasks that report back, so the mailbox never waits on a tool.
//! The actor stops when nothing is open; the supervisor restarts a crashed one from the
//! stored records (parked calls are parked again; a call that was running is settled as
//! an error), so no call is lost silently.

mod actor;
mod supervisor;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use ractor::{Actor, ActorRef};
use serde_json::Value;
use uuid::Uuid;

use actor::ConfirmMsg;
use supervisor::{ConfirmationSupervisor, SupervisorArgs, SupervisorMsg};

use crate::actors::is_alive;
use crate::domain::{ToolCallRecord, ToolCallStatus, UserId};
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::store::Store;

/// What running a tool produced, as the record will hold it.
pub struct ExecOutcome {
    pub response: Value,
    pub is_error: bool,
    /// The stable error code when the call failed before producing a result.
    pub error_code: Option<String>,
    pub latency: Duration,
}

/// Runs one approved call: (user, server, tool, arguments).
pub type Executor =
    Arc<dyn Fn(UserId, Uuid, String, Value) -> BoxFuture<'static, ExecOutcome> + Send + Sync>;

/// Everything an actor needs besides its records.
#[derive(Clone)]
pub struct ConfirmDeps {
    pub store: Store,
    pub events: Arc<EventHub>,
    pub executor: Executor,
    pub timeout: Duration,
    /// Calls parked for approval across all actors (each reports its own changes).
    pub parked: Arc<std::sync::atomic::AtomicI64>,
}

pub const TOOL_CALL_EVENT: &str = "assistant.toolCall.updated";

/// The response of a call still parked when the service stops.
pub const STOPPED_BEFORE_APPROVAL: &str =
    "cancelled: the service stopped before this call was approved";

/// Live confirmation actors by message, with the user each belongs to.
#[derive(Default)]
pub struct Registry {
    actors: Mutex<HashMap<Uuid, (UserId, ActorRef<ConfirmMsg>)>>,
}

/// What the registry knows about a message id.
enum Lookup {
    Mine(ActorRef<ConfirmMsg>),
    /// Live, but another user's: it must answer exactly like a missing message.
    Others,
    Absent,
}

impl Registry {
    fn lookup(&self, user: &UserId, message: Uuid) -> Lookup {
        let actors = self.actors.lock().expect("registry lock");
        match actors.get(&message) {
            Some((_, actor)) if !is_alive(actor) => Lookup::Absent,
            Some((owner, actor)) if owner == user => Lookup::Mine(actor.clone()),
            Some(_) => Lookup::Others,
            None => Lookup::Absent,
        }
    }

    fn insert(&self, user: UserId, message: Uuid, actor: ActorRef<ConfirmMsg>) {
        self.actors
            .lock()
            .expect("registry lock")
            .insert(message, (user, actor));
    }

    fn remove_if(&self, message: Uuid, actor: ractor::ActorId) {
        let mut actors = self.actors.lock().expect("registry lock");
        if actors
            .get(&message)
            .is_some_and(|(_, a)| a.get_id() == actor)
        {
            actors.remove(&message);
        }
    }

    fn len(&self) -> usize {
        self.actors.lock().expect("registry lock").len()
    }

    fn all(&self) -> Vec<ActorRef<ConfirmMsg>> {
        self.actors
            .lock()
            .expect("registry lock")
            .values()
            .map(|(_, actor)| actor.clone())
            .collect()
    }
}

/// Asks one actor to cancel its parked calls; how many it cancelled (0 if it did not answer).
async fn cancel_parked_on(actor: ActorRef<ConfirmMsg>, reason: String, wait: Duration) -> usize {
    match actor
        .call(
            move |reply| ConfirmMsg::CancelParked { reason, reply },
            Some(wait),
        )
        .await
    {
        Ok(ractor::rpc::CallResult::Success(count)) => count,
        _ => 0,
    }
}

#[derive(Clone)]
pub struct Confirmations {
    supervisor: ActorRef<SupervisorMsg>,
    registry: Arc<Registry>,
    deps: ConfirmDeps,
}

/// `Settled` when nothing is open any more.
pub enum Waited {
    Settled(Vec<ToolCallRecord>),
    StillOpen(Vec<ToolCallRecord>),
}

impl Confirmations {
    pub async fn start(deps: ConfirmDeps) -> Result<Self> {
        let registry = Arc::new(Registry::default());
        let (supervisor, _) = Actor::spawn(
            None,
            ConfirmationSupervisor,
            SupervisorArgs {
                registry: registry.clone(),
                deps: deps.clone(),
            },
        )
        .await
        .map_err(|e| Error::Unexpected(anyhow::anyhow!("confirmation supervisor: {e}")))?;
        Ok(Self {
            supervisor,
            registry,
            deps,
        })
    }

    /// Messages with live actors (each holds at least one open call).
    pub fn active_messages(&self) -> usize {
        self.registry.len()
    }

    /// Tool calls waiting for the user's approval right now.
    pub fn parked_calls(&self) -> i64 {
        self.deps.parked.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn actor(
        &self,
        user: &UserId,
        message: Uuid,
        create: bool,
    ) -> Result<ActorRef<ConfirmMsg>> {
        match self.registry.lookup(user, message) {
            Lookup::Mine(actor) => return Ok(actor),
            Lookup::Others => return Err(Error::NotFound(Resource::Message, message.to_string())),
            Lookup::Absent => {}
        }
        let reply = self
            .supervisor
            .call(
                |reply| SupervisorMsg::Open {
                    user: user.clone(),
                    message,
                    create,
                    reply,
                },
                Some(Duration::from_secs(10)),
            )
            .await
            .map_err(|e| Error::Unexpected(anyhow::anyhow!("confirmation supervisor: {e}")))?;
        match reply {
            ractor::rpc::CallResult::Success(result) => result,
            _ => Err(Error::Unexpected(anyhow::anyhow!(
                "the confirmation supervisor did not answer"
            ))),
        }
    }

    async fn ask<T: Send + 'static>(
        &self,
        user: &UserId,
        message: Uuid,
        create: bool,
        build: impl Fn(ractor::RpcReplyPort<Result<T>>) -> ConfirmMsg + Clone,
    ) -> Result<T> {
        // An actor that just stopped (nothing open) is replaced by a fresh one.
        for _ in 0..3 {
            let actor = self.actor(user, message, create).await?;
            match actor
                .call(build.clone(), Some(Duration::from_secs(30)))
                .await
            {
                Ok(ractor::rpc::CallResult::Success(result)) => return result,
                Ok(ractor::rpc::CallResult::Timeout) => {
                    return Err(Error::Unexpected(anyhow::anyhow!(
                        "the confirmation actor did not answer"
                    )));
                }
                _ => continue,
            }
        }
        Err(Error::Unexpected(anyhow::anyhow!(
            "the confirmation actor kept stopping"
        )))
    }

    /// Adds calls to a message (creating it if needed) and returns all its records.
    pub async fn submit(
        &self,
        user: &UserId,
        message: Uuid,
        conversation: Option<Uuid>,
        calls: Vec<ToolCallRecord>,
    ) -> Result<Vec<ToolCallRecord>> {
        let span = tracing::Span::current();
        self.ask(user, message, true, move |reply| ConfirmMsg::Submit {
            conversation,
            calls: calls.clone(),
            reply,
            span: span.clone(),
        })
        .await
    }

    pub async fn confirm(
        &self,
        user: &UserId,
        message: Uuid,
        call_id: &str,
        approved: bool,
    ) -> Result<ToolCallRecord> {
        let ask = {
            let call_id = call_id.to_owned();
            let span = tracing::Span::current();
            move |reply| ConfirmMsg::Confirm {
                call_id: call_id.clone(),
                approved,
                reply,
                span: span.clone(),
            }
        };
        // The live actor knows its records: no database read on the hot path.
        if let Lookup::Mine(actor) = self.registry.lookup(user, message)
            && let Ok(ractor::rpc::CallResult::Success(result)) =
                actor.call(ask.clone(), Some(Duration::from_secs(30))).await
        {
            return result;
        }
        // No live actor: the stored record says whether there is anything to decide.
        let stored = self
            .deps
            .store
            .messages()
            .get(user, message)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::Message, message.to_string()))?;
        let record = stored
            .tool_calls
            .iter()
            .find(|c| c.id == call_id)
            .ok_or_else(|| Error::NotFound(Resource::ToolCall, call_id.to_owned()))?;
        if record.status != ToolCallStatus::Pending {
            return Err(Error::AlreadySettled(call_id.to_owned()));
        }
        self.ask(user, message, false, ask).await
    }

    /// Waits up to `wait` until no call of the message is open.
    pub async fn wait_settled(
        &self,
        user: &UserId,
        message: Uuid,
        wait: Duration,
    ) -> Result<Waited> {
        if let Lookup::Mine(actor) = self.registry.lookup(user, message) {
            let waited = actor.call(ConfirmMsg::WaitSettled, Some(wait)).await;
            if let Ok(ractor::rpc::CallResult::Success(records)) = waited {
                return Ok(Waited::Settled(records));
            }
        }
        let stored = self
            .deps
            .store
            .messages()
            .get(user, message)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::Message, message.to_string()))?;
        Ok(if stored.tool_calls.iter().any(|c| c.status.is_open()) {
            Waited::StillOpen(stored.tool_calls)
        } else {
            Waited::Settled(stored.tool_calls)
        })
    }

    /// Cancels the message's parked calls, if it has a live actor; returns how many.
    pub async fn cancel_parked(&self, user: &UserId, message: Uuid, reason: &str) -> usize {
        let Lookup::Mine(actor) = self.registry.lookup(user, message) else {
            return 0;
        };
        cancel_parked_on(actor, reason.to_owned(), Duration::from_secs(30)).await
    }

    /// On start-up: records a previous process left open can never settle; say so.
    pub async fn settle_interrupted(store: &Store) -> Result<usize> {
        let messages = store.messages().with_open_calls().await?;
        let mut settled = 0;
        for mut message in messages {
            for call in message.tool_calls.iter_mut().filter(|c| c.status.is_open()) {
                call.status = match call.status {
                    ToolCallStatus::Pending => ToolCallStatus::Cancelled,
                    _ => ToolCallStatus::Error,
                };
                call.response = Value::String("interrupted by restart".into());
                call.is_error = true;
                settled += 1;
            }
            store
                .messages()
                .save_tool_calls(&message.user_id, message.id, &message.tool_calls)
                .await?;
        }
        if settled > 0 {
            tracing::warn!(
                settled,
                "settled tool calls left open by a previous process"
            );
        }
        Ok(settled)
    }

    /// Settles every parked call (stored and announced, so no client waits on it), then
    /// stops the actors. Calls already running are settled by the next start.
    pub async fn shutdown(&self) {
        let cancelled = futures::future::join_all(self.registry.all().into_iter().map(|actor| {
            cancel_parked_on(
                actor,
                STOPPED_BEFORE_APPROVAL.into(),
                Duration::from_secs(5),
            )
        }))
        .await
        .into_iter()
        .sum::<usize>();
        if cancelled > 0 {
            tracing::info!(cancelled, "parked tool calls cancelled by the shutdown");
        }
        let _ = self
            .supervisor
            .stop_and_wait(Some("shutdown".into()), Some(Duration::from_secs(10)))
            .await;
    }
}
