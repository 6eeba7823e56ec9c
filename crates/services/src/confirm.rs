//! Tool calls awaiting the user's approval: one `ConfirmationActor` per message.
//!
//! The actor is the only writer of its message's ToolCallRecords while any call is open:
//! every change is written to the database, then announced on the user's event stream.
//! Auto-approved calls run at once; others are parked until approved, rejected or timed
//! out. Calls execute in tasks that report back, so the mailbox never waits on a tool.
//! The actor stops when nothing is open; the supervisor restarts a crashed one from the
//! stored records (parked calls are parked again; a call that was running is settled as
//! an error), so no call is lost silently.
//!
//! With several instances, a message's open calls belong to the instance whose actor
//! holds them (`messages.owner_instance`); an approval arriving elsewhere is forwarded to
//! it (see `cluster`), and only the calls of instances that stopped are settled.

mod actor;
mod registry;
mod remote;
mod supervisor;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use ractor::{Actor, ActorRef};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use uuid::Uuid;

use actor::ConfirmMsg;
use registry::Lookup;
pub use registry::Registry;
use supervisor::{ConfirmationSupervisor, SupervisorArgs, SupervisorMsg};

use crate::cluster::{Cluster, ConfirmFailure, Note};
use crate::domain::{InstanceId, ToolCallRecord, ToolCallStatus, UserId};
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::store::{Store, StoredMessage};

/// What running a tool produced, as the record will hold it.
pub struct ExecOutcome {
    pub response: Value,
    pub is_error: bool,
    /// The stable error code when the call failed before producing a result.
    pub error_code: Option<String>,
    pub latency: Duration,
}

impl ExecOutcome {
    /// What the record settles as: the same for its audit row and for the record.
    pub fn status(&self) -> ToolCallStatus {
        if self.is_error {
            ToolCallStatus::Error
        } else {
            ToolCallStatus::Done
        }
    }
}

/// Runs one approved call: (user, server, tool, arguments).
pub(crate) type Executor = Arc<dyn Fn(Execution) -> BoxFuture<'static, ExecOutcome> + Send + Sync>;

/// One approved call to run.
pub struct Execution {
    pub user: UserId,
    pub server: Uuid,
    pub tool: String,
    pub arguments: Value,
    /// The conversation or gateway session whose upstream sessions it uses.
    pub scope: Option<Arc<str>>,
    /// Who submitted it, for its audit row.
    pub origin: crate::domain::CallOrigin,
}

/// Everything an actor needs besides its records.
#[derive(Clone)]
pub struct ConfirmDeps {
    pub store: Store,
    pub events: Arc<EventHub>,
    pub executor: Executor,
    pub timeout: Duration,
    /// Calls parked for approval across all actors (each reports its own changes).
    pub parked: Arc<std::sync::atomic::AtomicI64>,
    pub cluster: Cluster,
}

/// Publishes a changed record on the user's stream here and tells the other instances,
/// whose streams of that user relay it.
fn announce(deps: &ConfirmDeps, user: &UserId, message: Uuid, record: &ToolCallRecord) {
    deps.events
        .publish(user, TOOL_CALL_EVENT, tool_call_event(message, record));
    if deps.cluster.has_company() {
        let inline = serde_json::to_string(record)
            .ok()
            .filter(|json| json.len() <= crate::cluster::MAX_INLINE_BYTES)
            .and_then(|json| serde_json::from_str(&json).ok());
        deps.cluster.tell(Note::ToolCallChanged {
            user: user.to_string(),
            message,
            call_id: record.id.clone(),
            record: inline,
        });
    }
}

fn tool_call_event(message: Uuid, record: &impl serde::Serialize) -> Value {
    json!({"messageId": message, "toolCall": record})
}

/// What a call left open by a stopped instance becomes.
const INTERRUPTED: &str = "interrupted: the service instance holding this call stopped";

pub const TOOL_CALL_EVENT: &str = "assistant.toolCall.updated";

/// The response of a call still parked when the service stops.
pub(crate) const STOPPED_BEFORE_APPROVAL: &str =
    "cancelled: the service stopped before this call was approved";

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

type ForwardAnswer = std::result::Result<(), ConfirmFailure>;

#[derive(Clone)]
pub struct Confirmations {
    supervisor: ActorRef<SupervisorMsg>,
    registry: Arc<Registry>,
    deps: ConfirmDeps,
    /// Confirmations forwarded to another instance, by request id, awaiting its answer.
    forwarded: Arc<Mutex<HashMap<Uuid, oneshot::Sender<ForwardAnswer>>>>,
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
            forwarded: Arc::default(),
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
    /// Its calls run in the session of `scope` (a gateway session), else of its
    /// conversation, on servers with a session per conversation.
    pub async fn submit(
        &self,
        user: &UserId,
        message: Uuid,
        conversation: Option<Uuid>,
        scope: Option<Arc<str>>,
        calls: Vec<ToolCallRecord>,
        origin: crate::domain::CallOrigin,
    ) -> Result<Vec<ToolCallRecord>> {
        let span = tracing::Span::current();
        let scope = scope.or_else(|| conversation.map(|c| Arc::from(c.to_string())));
        self.ask(user, message, true, move |reply| ConfirmMsg::Submit {
            conversation,
            scope: scope.clone(),
            calls: calls.clone(),
            origin,
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
        self.decide(user, message, call_id, approved, true).await
    }

    async fn decide(
        &self,
        user: &UserId,
        message: Uuid,
        call_id: &str,
        approved: bool,
        may_forward: bool,
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
        let stored = self.stored(user, message).await?;
        let record = stored
            .tool_calls
            .iter()
            .find(|c| c.id == call_id)
            .ok_or_else(|| Error::NotFound(Resource::ToolCall, call_id.to_owned()))?;
        if record.status != ToolCallStatus::Pending {
            return Err(Error::AlreadySettled(call_id.to_owned()));
        }
        let cluster = &self.deps.cluster;
        if let Some(owner) = stored.owner_instance
            && owner != cluster.me()
            && cluster.is_live(owner).await?
        {
            if !may_forward {
                return Err(Error::HeldElsewhere);
            }
            return self.forward(owner, user, message, call_id, approved).await;
        }
        self.ask(user, message, false, ask).await
    }

    /// The user's stored message; another user's answers exactly like a missing one.
    async fn stored(&self, user: &UserId, message: Uuid) -> Result<StoredMessage> {
        self.deps
            .store
            .messages()
            .get(user, message)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::Message, message.to_string()))
    }

    /// Waits up to `wait` until no call of the message is open.
    pub(crate) async fn wait_settled(
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
        let stored = self.stored(user, message).await?;
        Ok(if stored.tool_calls.iter().any(|c| c.status.is_open()) {
            Waited::StillOpen(stored.tool_calls)
        } else {
            Waited::Settled(stored.tool_calls)
        })
    }

    /// Cancels the message's parked calls, if it has a live actor; returns how many.
    pub(crate) async fn cancel_parked(&self, user: &UserId, message: Uuid, reason: &str) -> usize {
        let Lookup::Mine(actor) = self.registry.lookup(user, message) else {
            return 0;
        };
        cancel_parked_on(actor, reason.to_owned(), Duration::from_secs(30)).await
    }

    /// Settles the open calls of messages no live instance holds (at start-up: those a
    /// previous process left; later: those of instances that stopped beating). Each
    /// message is taken over first, so two instances never settle the same one.
    pub(crate) async fn settle_orphans(&self, live: &[InstanceId]) -> Result<usize> {
        let orphans = self.deps.store.messages().orphaned(live).await?;
        let mut settled = 0;
        for orphan in orphans {
            let live = live.to_vec();
            let result = self
                .supervisor
                .call(
                    |reply| SupervisorMsg::SettleOrphan {
                        user: orphan.user_id.clone(),
                        message: orphan.id,
                        live,
                        reply,
                    },
                    Some(Duration::from_secs(30)),
                )
                .await;
            match result {
                Ok(ractor::rpc::CallResult::Success(result)) => settled += result?,
                _ => {
                    return Err(Error::Unexpected(anyhow::anyhow!(
                        "the confirmation supervisor did not answer"
                    )));
                }
            }
        }
        if settled > 0 {
            tracing::warn!(
                settled,
                "settled tool calls left open by a stopped instance"
            );
        }
        Ok(settled)
    }

    /// Settles every parked call (stored and announced, so no client waits on it), then
    /// stops the actors. Calls already running are settled by the next sweep of any
    /// instance (this one's row is removed when it stops).
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
