//! `ConfirmationActor`: the records of one message while any of its calls is open.

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::Value;
use uuid::Uuid;

use super::{ConfirmDeps, ExecOutcome};
use crate::domain::{CallOrigin, CallVia, ToolCallRecord, ToolCallStatus, UserId};
use crate::error::{Error, Resource, Result};
use crate::store::StoredMessage;

pub enum ConfirmMsg {
    Submit {
        conversation: Option<Uuid>,
        /// The session its calls run in (see [`super::Confirmations::submit`]).
        scope: Option<std::sync::Arc<str>>,
        calls: Vec<ToolCallRecord>,
        /// Who submitted them: what their executions' audit rows say.
        origin: CallOrigin,
        reply: RpcReplyPort<Result<Vec<ToolCallRecord>>>,
        /// The submitter's span (its request id): executions it starts log under it.
        span: tracing::Span,
    },
    Confirm {
        call_id: String,
        approved: bool,
        reply: RpcReplyPort<Result<ToolCallRecord>>,
        /// The approver's span (its request id): the execution logs under it.
        span: tracing::Span,
    },
    Executed {
        call_id: String,
        outcome: ExecOutcome,
    },
    TimedOut {
        call_id: String,
    },
    WaitSettled(RpcReplyPort<Vec<ToolCallRecord>>),
    /// Cancels every parked call (its chat went away); running calls finish.
    CancelParked {
        reason: String,
        reply: RpcReplyPort<usize>,
    },
}

pub struct ActorArgs {
    pub user: UserId,
    pub message: Uuid,
    /// Whether the message row exists yet.
    pub exists: bool,
    pub records: Vec<ToolCallRecord>,
    /// Who submitted the stored records.
    pub origins: crate::store::CallOrigins,
    /// The session its calls use, when the message is stored with a conversation.
    pub scope: Option<std::sync::Arc<str>>,
    pub deps: ConfirmDeps,
}

pub struct ActorState {
    user: UserId,
    message: Uuid,
    exists: bool,
    records: Vec<ToolCallRecord>,
    deps: ConfirmDeps,
    waiters: Vec<RpcReplyPort<Vec<ToolCallRecord>>>,
    /// Approval deadlines: each holds the actor's cell, so they end with the actor rather
    /// than sleeping out the full timeout after everything settled.
    timers: Vec<tokio::task::AbortHandle>,
    /// Parked records this actor has counted into `deps.parked`.
    reported_parked: i64,
    /// Another instance took the message over (this one was presumed dead): stop.
    fenced: bool,
    /// The conversation or gateway session whose upstream sessions its calls use.
    scope: Option<std::sync::Arc<str>>,
    /// Who submitted each call, by call id (stored with the call, so a message read back
    /// after a restart still knows; calls stored before that say `chat` without a key).
    origins: crate::store::CallOrigins,
}

pub struct ConfirmationActor;

/// How often a write the database refused is tried again.
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends `again` to the actor after [`RETRY_EVERY`] when `error` is an outage (the
/// database will take the write once it is back); any other error fails the turn.
fn retry_while_unavailable(
    error: Error,
    myself: &ActorRef<ConfirmMsg>,
    again: impl FnOnce() -> ConfirmMsg + Send + 'static,
) -> Result<()> {
    if !error.is_unavailable() {
        return Err(error);
    }
    tracing::warn!(%error, "a call's settlement waits for the database");
    myself.send_after(RETRY_EVERY, again);
    Ok(())
}

impl ActorState {
    /// Writes the records from `first` on, new to the message (the message too when it
    /// does not exist yet); the caller announces only after this succeeded.
    async fn persist_new(&mut self, conversation: Option<Uuid>, first: usize) -> Result<()> {
        let repo = self.deps.store.messages();
        let me = self.deps.cluster.me();
        if self.exists {
            let open = self.open_count();
            let added = repo
                .add_tool_calls(
                    &self.user,
                    self.message,
                    crate::store::AddedCalls {
                        records: &self.records[first..],
                        origins: &self.origins,
                        first_position: first,
                    },
                    me,
                    open,
                )
                .await?;
            return self.fence_unless(added);
        }
        let now = crate::domain::now();
        repo.insert(&StoredMessage {
            id: self.message,
            user_id: self.user.clone(),
            conversation_id: conversation,
            role: "assistant".into(),
            content: String::new(),
            tool_calls: self.records.clone(),
            metadata: None,
            owner_instance: Some(me),
            created_at: now,
            updated_at: now,
            origins: self.origins.clone(),
        })
        .await?;
        self.exists = true;
        Ok(())
    }

    /// Writes the records at `indices` (one row each, nothing else of the message); the
    /// caller announces only after this succeeded.
    async fn persist(&mut self, indices: &[usize]) -> Result<()> {
        let me = self.deps.cluster.me();
        let open = self.open_count();
        let records: Vec<&ToolCallRecord> = indices.iter().map(|&i| &self.records[i]).collect();
        let saved = self
            .deps
            .store
            .messages()
            .update_tool_calls(&self.user, self.message, &records, me, open)
            .await?;
        self.fence_unless(saved)
    }

    /// A write refused because another instance holds the message: this actor stops.
    fn fence_unless(&mut self, written: bool) -> Result<()> {
        if written {
            return Ok(());
        }
        self.fenced = true;
        Err(Error::HeldElsewhere)
    }

    fn announce(&self, record: &ToolCallRecord) {
        super::announce(&self.deps, &self.user, self.message, record);
    }

    fn index(&self, call_id: &str) -> Option<usize> {
        self.records.iter().position(|r| r.id == call_id)
    }

    /// Starts the call in a task, once its 'invoking' is stored.
    fn start_execution(
        &self,
        myself: &ActorRef<ConfirmMsg>,
        record: &ToolCallRecord,
        span: &tracing::Span,
    ) {
        let (Some(server), Some(tool)) = (record.server_id, record.tool_name.clone()) else {
            return;
        };
        let executor = self.deps.executor.clone();
        let (me, user, call_id, arguments, scope) = (
            myself.clone(),
            self.user.clone(),
            record.id.clone(),
            record.arguments.clone(),
            self.scope.clone(),
        );
        let origin = self
            .origins
            .get(&record.id)
            .copied()
            .unwrap_or(CallOrigin::new(CallVia::Chat))
            .with_message(self.message);
        // The call's audit row is written on its way through the pool (`UpstreamService`).
        let execution = async move {
            let outcome = executor(super::Execution {
                user,
                server,
                tool,
                arguments,
                scope,
                origin,
            })
            .await;
            let _ = me.cast(ConfirmMsg::Executed { call_id, outcome });
        };
        tokio::spawn(tracing::Instrument::instrument(execution, span.clone()));
    }

    fn park(
        &self,
        myself: &ActorRef<ConfirmMsg>,
        record: &ToolCallRecord,
    ) -> tokio::task::AbortHandle {
        let call_id = record.id.clone();
        myself
            .send_after(self.deps.timeout, move || ConfirmMsg::TimedOut { call_id })
            .abort_handle()
    }

    /// Settles the records at `indices` alike in one statement, then announces each; on a
    /// failed write they are left as they were. A shutdown may settle thousands at once.
    async fn settle(
        &mut self,
        indices: &[usize],
        status: ToolCallStatus,
        response: Value,
        is_error: bool,
    ) -> Result<()> {
        self.try_settle(indices, status, response, is_error)
            .await
            .map_err(|(error, _)| error)
    }

    /// [`Self::settle`], handing `response` back with the error when the write failed.
    async fn try_settle(
        &mut self,
        indices: &[usize],
        status: ToolCallStatus,
        response: Value,
        is_error: bool,
    ) -> std::result::Result<(), (Error, Value)> {
        let Some(&last) = indices.last() else {
            return Ok(());
        };
        let previous: Vec<ToolCallRecord> =
            indices.iter().map(|&i| self.records[i].clone()).collect();
        // The last record takes `response` itself: a single settle copies no result.
        for (&index, response) in indices
            .iter()
            .zip(std::iter::repeat_n(response, indices.len()))
        {
            let record = &mut self.records[index];
            record.status = status;
            record.response = response;
            record.is_error = is_error;
        }
        if let Err(e) = self.persist(indices).await {
            let response = std::mem::take(&mut self.records[last].response);
            for (&index, record) in indices.iter().zip(previous) {
                self.records[index] = record;
            }
            return Err((e, response));
        }
        for &index in indices {
            self.announce(&self.records[index]);
        }
        Ok(())
    }

    /// Settles a running call with its result; on a failed write the record is left
    /// running and the outcome handed back, to be tried again.
    async fn settle_execution(
        &mut self,
        index: usize,
        outcome: ExecOutcome,
    ) -> std::result::Result<(), (Error, ExecOutcome)> {
        let status = outcome.status();
        let ExecOutcome {
            response,
            is_error,
            error_code,
            latency,
        } = outcome;
        self.try_settle(&[index], status, response, is_error)
            .await
            .map_err(|(error, response)| {
                let outcome = ExecOutcome {
                    response,
                    is_error,
                    error_code,
                    latency,
                };
                (error, outcome)
            })
    }

    /// Brings the shared parked-call count in line with this message's records.
    fn report_parked(&mut self) {
        let parked = self
            .records
            .iter()
            .filter(|r| r.status == ToolCallStatus::Pending)
            .count() as i64;
        self.deps.parked.fetch_add(
            parked - self.reported_parked,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.reported_parked = parked;
    }

    fn open(&self) -> bool {
        self.records.iter().any(|r| r.status.is_open())
    }

    /// The message's calls still open: this actor holds all of them, so it tells the
    /// store the count with each write instead of the store counting rows.
    fn open_count(&self) -> usize {
        self.records.iter().filter(|r| r.status.is_open()).count()
    }

    fn stop_if_done(&mut self, myself: &ActorRef<ConfirmMsg>) {
        if !self.open() {
            for waiter in self.waiters.drain(..) {
                let _ = waiter.send(self.records.clone());
            }
            myself.stop(None);
        }
    }
}

impl Actor for ConfirmationActor {
    type Msg = ConfirmMsg;
    type State = ActorState;
    type Arguments = ActorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ActorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = ActorState {
            user: args.user,
            message: args.message,
            exists: args.exists,
            records: args.records,
            deps: args.deps,
            waiters: Vec::new(),
            timers: Vec::new(),
            reported_parked: 0,
            fenced: false,
            scope: args.scope,
            origins: args.origins,
        };
        // Restarted from storage: parked calls wait again; a running call's task is gone.
        let interrupted: Vec<usize> = (0..state.records.len())
            .filter(|&i| state.records[i].status == ToolCallStatus::Invoking)
            .collect();
        state
            .settle(
                &interrupted,
                ToolCallStatus::Error,
                Value::String("interrupted: the call's worker stopped".into()),
                true,
            )
            .await?;
        for record in state
            .records
            .iter()
            .filter(|r| r.status == ToolCallStatus::Pending)
        {
            let timer = state.park(&myself, record);
            state.timers.push(timer);
        }
        state.report_parked();
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ConfirmMsg::Submit {
                conversation,
                scope,
                calls,
                origin,
                reply,
                span,
            } => {
                if scope.is_some() {
                    state.scope = scope;
                }
                for call in &calls {
                    state.origins.entry(call.id.clone()).or_insert(origin);
                }
                let mut seen: std::collections::HashSet<&str> =
                    state.records.iter().map(|r| r.id.as_str()).collect();
                if let Some(dup) = calls.iter().find(|c| !seen.insert(c.id.as_str())) {
                    let _ = reply.send(Err(Error::Conflict(format!(
                        "tool call '{}' already exists on this message",
                        dup.id
                    ))));
                    return Ok(());
                }
                let before = state.records.len();
                state.records.extend(calls);
                if let Err(e) = state.persist_new(conversation, before).await {
                    state.records.truncate(before);
                    let _ = reply.send(Err(e));
                    return Ok(());
                }
                for record in &state.records[before..] {
                    state.announce(record);
                    match record.status {
                        ToolCallStatus::Invoking => {
                            state.start_execution(&myself, record, &span);
                        }
                        ToolCallStatus::Pending => {
                            let timer = state.park(&myself, record);
                            state.timers.push(timer);
                        }
                        _ => {}
                    }
                }
                let _ = reply.send(Ok(state.records.clone()));
            }
            ConfirmMsg::Confirm {
                call_id,
                approved,
                reply,
                span,
            } => {
                let Some(index) = state.index(&call_id) else {
                    let _ = reply.send(Err(Error::NotFound(Resource::ToolCall, call_id)));
                    return Ok(());
                };
                if state.records[index].status != ToolCallStatus::Pending {
                    let _ = reply.send(Err(Error::AlreadySettled(call_id)));
                    return Ok(());
                }
                let result = if approved {
                    // The decision is stored before the call starts: a write that fails
                    // (the database gone, a full disk) leaves the call parked and unrun,
                    // so the approval retried later runs it once. Started first, a call
                    // could not be taken back once the server had run it.
                    state.records[index].status = ToolCallStatus::Invoking;
                    let persisted = state.persist(&[index]).await;
                    match &persisted {
                        Ok(()) => {
                            state.announce(&state.records[index]);
                            state.start_execution(&myself, &state.records[index], &span);
                        }
                        Err(_) => state.records[index].status = ToolCallStatus::Pending,
                    }
                    persisted
                } else {
                    state
                        .settle(
                            &[index],
                            ToolCallStatus::Cancelled,
                            Value::String("The user rejected this tool call.".into()),
                            true,
                        )
                        .await
                };
                let _ = reply.send(result.map(|()| state.records[index].clone()));
            }
            ConfirmMsg::Executed { call_id, outcome } => {
                if let Some(index) = state.index(&call_id)
                    && state.records[index].status == ToolCallStatus::Invoking
                {
                    // Its audit row is written already (`start_execution`).
                    if let Err((error, outcome)) = state.settle_execution(index, outcome).await {
                        // The result is kept here until the database takes it.
                        retry_while_unavailable(error, &myself, move || ConfirmMsg::Executed {
                            call_id,
                            outcome,
                        })?;
                    }
                }
            }
            ConfirmMsg::TimedOut { call_id } => {
                if let Some(index) = state.index(&call_id)
                    && state.records[index].status == ToolCallStatus::Pending
                {
                    let waited = state.deps.timeout.as_secs();
                    let settled = state
                        .settle(
                            &[index],
                            ToolCallStatus::Cancelled,
                            Value::String(format!(
                                "No approval within {waited} s; the call was cancelled."
                            )),
                            true,
                        )
                        .await;
                    if let Err(error) = settled {
                        retry_while_unavailable(error, &myself, move || ConfirmMsg::TimedOut {
                            call_id,
                        })?;
                    }
                }
            }
            ConfirmMsg::CancelParked { reason, reply } => {
                let parked: Vec<usize> = (0..state.records.len())
                    .filter(|&i| state.records[i].status == ToolCallStatus::Pending)
                    .collect();
                state
                    .settle(
                        &parked,
                        ToolCallStatus::Cancelled,
                        Value::String(reason),
                        true,
                    )
                    .await?;
                let _ = reply.send(parked.len());
            }
            ConfirmMsg::WaitSettled(reply) => {
                if state.open() {
                    state.waiters.push(reply);
                } else {
                    let _ = reply.send(state.records.clone());
                }
            }
        }
        state.report_parked();
        if state.fenced {
            tracing::warn!(message = %state.message, "another instance took this message over; its actor here stops");
            myself.stop(Some("taken over by another instance".into()));
            return Ok(());
        }
        state.stop_if_done(&myself);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for timer in state.timers.drain(..) {
            timer.abort();
        }
        // Whatever is still parked is no longer waiting here.
        state.deps.parked.fetch_sub(
            std::mem::take(&mut state.reported_parked),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }
}
