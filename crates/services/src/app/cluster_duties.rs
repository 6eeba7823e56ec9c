//! What an instance does for the others: act on their notes, and every heartbeat settle
//! the calls and take over the bridges of instances that stopped.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::Services;
use crate::cluster::{Envelope, Note, ParkedKind};
use crate::domain::{AssistantId, UserId};

impl Services {
    /// Settles what stopped instances left and starts the bridges this instance may
    /// run; before serving, so a restarted single instance is consistent at once.
    pub async fn take_over_orphans(&self) -> crate::error::Result<()> {
        let live = self.cluster.beat().await?;
        self.confirmations.settle_orphans(&live).await?;
        let upstream = self.upstream.clone();
        let follow_on =
            move |task: &crate::store::StoredTask, handle| upstream.follow_on(task, handle);
        self.tasks.settle_orphans(&live, &follow_on).await?;
        let started = self.xiaozhi.reconcile(&live).await?;
        if started > 0 {
            tracing::info!(started, "Xiaozhi bridges started");
        }
        Ok(())
    }

    /// Runs until `stop`: the heartbeat with its sweep, and the note handler.
    pub fn start_cluster_duties(&self, stop: CancellationToken) {
        let services = self.clone();
        let heartbeat_stop = stop.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(services.cluster.heartbeat_interval());
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = heartbeat_stop.cancelled() => return,
                }
                if let Err(error) = services.take_over_orphans().await {
                    tracing::warn!(%error, "heartbeat or sweep failed; retrying at the next one");
                }
            }
        });
        let services = self.clone();
        let mut notes = self.cluster.notes();
        tokio::spawn(async move {
            loop {
                let envelope = tokio::select! {
                    received = notes.recv() => match received {
                        Ok(envelope) => envelope,
                        Err(RecvError::Lagged(missed)) => {
                            tracing::warn!(missed, "cluster notes were dropped: handling was too slow");
                            continue;
                        }
                        Err(RecvError::Closed) => return,
                    },
                    _ = stop.cancelled() => return,
                };
                services.handle_note(envelope).await;
            }
        });
    }

    async fn handle_note(&self, envelope: Arc<Envelope>) {
        let me = self.cluster.me();
        match &envelope.note {
            Note::Joined => tracing::info!(instance = %envelope.from, "another instance joined"),
            Note::ConfirmCall {
                request,
                to,
                user,
                message,
                call_id,
                approved,
            } if *to == me => {
                let Ok(user) = UserId::parse(user) else {
                    return;
                };
                let (services, request, message, call_id, approved, from) = (
                    self.clone(),
                    *request,
                    *message,
                    call_id.clone(),
                    *approved,
                    envelope.from,
                );
                // The execution an approval starts must not hold up other notes.
                tokio::spawn(async move {
                    let outcome = services
                        .confirmations
                        .confirm_forwarded(&user, message, &call_id, approved)
                        .await;
                    services.cluster.tell(Note::CallConfirmed {
                        request,
                        to: from,
                        outcome,
                    });
                });
            }
            Note::CallConfirmed {
                request,
                to,
                outcome,
            } if *to == me => {
                self.confirmations
                    .forward_answered(*request, outcome.clone());
            }
            Note::CancelTask { to, task } if *to == me => self.tasks.stop_here(*task),
            Note::AnswerParked {
                request,
                to,
                user,
                parked,
                id,
                answer,
            } if *to == me => {
                let Ok(user) = UserId::parse(user) else {
                    return;
                };
                let verdict = match parked {
                    ParkedKind::Elicitation => {
                        self.elicitations
                            .answer_forwarded(&user, id, answer.clone())
                    }
                    ParkedKind::Sampling => {
                        self.sampling.answer_forwarded(&user, id, answer.clone())
                    }
                };
                self.cluster.tell(Note::ParkedAnswered {
                    request: *request,
                    to: envelope.from,
                    verdict,
                });
            }
            Note::ParkedAnswered {
                request,
                to,
                verdict,
            } if *to == me => self.forwarder.answered(*request, verdict.clone()),
            Note::AnswerTask {
                to,
                task,
                responses,
            } if *to == me => {
                let responses = responses.as_object().cloned().unwrap_or_default();
                self.tasks.answer_here(*task, responses).await;
            }
            Note::ResumeRound {
                request,
                to,
                user,
                state,
                responses,
            } if *to == me => {
                let Ok(user) = UserId::parse(user) else {
                    return;
                };
                // The round's call may run on for long: not in the note handler's turn.
                let (rounds, request, from) = (self.rounds.clone(), *request, envelope.from);
                let (state, responses) = (state.clone(), responses.clone());
                tokio::spawn(async move {
                    rounds
                        .resume_forwarded(request, from, &user, &state, responses)
                        .await;
                });
            }
            Note::RoundResumed {
                request,
                to,
                part,
                parts,
                text,
            } if *to == me => self.rounds.forwarded_part(*request, *part, *parts, text),
            Note::ConfirmCall { .. }
            | Note::CallConfirmed { .. }
            | Note::CancelTask { .. }
            | Note::AnswerTask { .. }
            | Note::AnswerParked { .. }
            | Note::ParkedAnswered { .. }
            | Note::ResumeRound { .. }
            | Note::RoundResumed { .. } => {}
            Note::ToolCallChanged {
                user,
                message,
                call_id,
                record,
            } => {
                if let Ok(user) = UserId::parse(user) {
                    self.confirmations
                        .relay_change(&user, *message, call_id, record.as_ref())
                        .await;
                }
            }
            Note::ServerChanged { user, server } => {
                // A team server's owner: every member's connections to it.
                if let Ok(user) = UserId::parse_owner(user) {
                    // Closing a session may take seconds; other notes do not wait for it.
                    let (pool, server) = (self.pool.clone(), *server);
                    tokio::spawn(async move { pool.stop_server(&user, server).await });
                }
            }
            Note::BindingsChanged => self.bindings.forget_here(),
            Note::UserEvent { user, name, data } => {
                // Only names this service publishes travel as notes.
                let name = match name.as_str() {
                    "mcp.oauth.completed" => "mcp.oauth.completed",
                    crate::services::tasks::TASK_UPDATED => crate::services::tasks::TASK_UPDATED,
                    _ => return,
                };
                if let Ok(user) = UserId::parse(user) {
                    self.events.publish(&user, name, data.clone());
                }
            }
            Note::BridgeChanged { user, assistant } => {
                if let (Ok(user), Ok(assistant)) =
                    (UserId::parse(user), AssistantId::parse(assistant))
                {
                    self.xiaozhi.changed_elsewhere(&user, &assistant);
                }
            }
        }
    }
}
