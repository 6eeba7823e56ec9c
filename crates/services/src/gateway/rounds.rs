//! Multi round-trip calls (MCP 2026-07-28, SEP-2322) for gateway clients that take no
//! server-to-client requests: what an upstream asks during a call (elicitation, sampling,
//! roots) goes back as an `InputRequiredResult`; the call runs on meanwhile, and the
//! client's retry (its answers and the `requestState`) resumes it. A round lives on the
//! instance whose call asked (its state names that instance: a retry that reaches another
//! instance behind a load balancer is handed there, `elsewhere.rs`), is resumed only by
//! its own user, once, and is cancelled (the upstream told)
//! when nobody resumes it within its time.

// Sampling and roots are deprecated in 2026-07-28 but are what 2025-11-25 servers send.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, CallToolResult, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, InputRequest,
    InputRequiredResult, InputResponses, ListRootsRequest, ListRootsResult,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;
use crate::domain::UserId;
use crate::mcp::downstream::Downstream;

mod elsewhere;

/// The key of the one input request each round carries.
const KEY: &str = "upstream";

/// How this gateway's own `requestState`s begin: a retry naming one of them resumes a round
/// here; any other state is an upstream's own, passed to it (see `mcp::CallPeers`).
const STATE_PREFIX: &str = "mcp-pool-round-";

/// A question of the upstream, with where its answer goes.
enum Question {
    Elicit(ElicitRequestParams, oneshot::Sender<Value>),
    Sample(CreateMessageRequestParams, oneshot::Sender<Value>),
    Roots(oneshot::Sender<Value>),
}

impl Question {
    fn split(self) -> (InputRequest, oneshot::Sender<Value>) {
        match self {
            Question::Elicit(params, reply) => {
                (InputRequest::Elicitation(ElicitRequest::new(params)), reply)
            }
            Question::Sample(params, reply) => (
                InputRequest::CreateMessage(CreateMessageRequest::new(params)),
                reply,
            ),
            Question::Roots(reply) => (InputRequest::ListRoots(ListRootsRequest::default()), reply),
        }
    }
}

/// One call whose client is asked in rounds.
struct Running {
    questions: mpsc::Receiver<Question>,
    result: tokio::task::JoinHandle<Result<CallToolResponse, ErrorData>>,
    /// Cancels the call when the round is dropped unanswered.
    _cancel: tokio_util::sync::DropGuard,
}

struct Waiting {
    user: UserId,
    running: Running,
    answer: oneshot::Sender<Value>,
}

/// The rounds waiting for their clients on this instance.
#[derive(Clone)]
pub struct Rounds {
    waiting: Arc<Mutex<HashMap<String, Waiting>>>,
    ttl: Duration,
    /// The instances, for retries of rounds held elsewhere; `None`: this instance alone
    /// (a handler of its own, as a Xiaozhi bridge's).
    elsewhere: Option<elsewhere::Elsewhere>,
}

/// Asks through rounds: each question goes to the handler that returns it to the client.
struct RoundAsked(mpsc::Sender<Question>);

impl RoundAsked {
    async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        question: impl FnOnce(oneshot::Sender<Value>) -> Question,
    ) -> Result<T, ErrorData> {
        let (reply, answered) = oneshot::channel();
        self.0
            .send(question(reply))
            .await
            .map_err(|_| ErrorData::internal_error("the client went away", None))?;
        let answer = answered
            .await
            .map_err(|_| ErrorData::invalid_request("the client did not answer in time", None))?;
        serde_json::from_value(answer)
            .map_err(|e| ErrorData::invalid_params(format!("the client's answer: {e}"), None))
    }
}

impl Downstream for RoundAsked {
    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        Box::pin(self.ask(|reply| Question::Elicit(params, reply)))
    }

    fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        Box::pin(self.ask(|reply| Question::Sample(params, reply)))
    }

    fn roots(&self) -> BoxFuture<'_, Option<Result<ListRootsResult, ErrorData>>> {
        Box::pin(async { Some(self.ask(Question::Roots).await) })
    }
}

impl Rounds {
    /// Rounds of one handler, that no other instance hands retries to.
    pub fn new(ttl: Duration) -> Self {
        Self {
            waiting: Arc::default(),
            ttl,
            elsewhere: None,
        }
    }

    /// The instance's rounds, shared by its gateway handlers: a retry of a round another
    /// instance holds is handed there and waited for up to `resume_wait`.
    pub fn in_cluster(ttl: Duration, cluster: Cluster, resume_wait: Duration) -> Self {
        Self {
            waiting: Arc::default(),
            ttl,
            elsewhere: Some(elsewhere::Elsewhere::new(cluster, resume_wait)),
        }
    }

    /// Runs `call` with a downstream that asks in rounds; the first round's answer.
    pub async fn start<F>(&self, user: &UserId, call: F) -> Result<CallToolResponse, ErrorData>
    where
        F: FnOnce(
            Arc<dyn Downstream>,
            CancellationToken,
        ) -> BoxFuture<'static, Result<CallToolResponse, ErrorData>>,
    {
        let (ask, questions) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let result = tokio::spawn(call(Arc::new(RoundAsked(ask)), cancel.clone()));
        let running = Running {
            questions,
            result,
            _cancel: cancel.drop_guard(),
        };
        self.next(user, running).await
    }

    /// `state` was made by this gateway's rounds (on some instance; it may be gone).
    pub fn made_here(state: &str) -> bool {
        state.starts_with(STATE_PREFIX)
    }

    /// A client's retry: its answer goes to the upstream, and the call goes on.
    pub async fn resume(
        &self,
        user: &UserId,
        state: &str,
        responses: Option<InputResponses>,
    ) -> Result<CallToolResponse, ErrorData> {
        let waiting = {
            let mut waiting = self.waiting.lock().expect("rounds lock");
            match waiting.get(state) {
                Some(round) if round.user == *user => waiting.remove(state),
                _ => None,
            }
        };
        let Some(round) = waiting else {
            if let Some(elsewhere) = &self.elsewhere
                && let Some(outcome) = elsewhere.resume(user, state, responses).await
            {
                return outcome;
            }
            return Err(ErrorData::invalid_params(
                "requestState is unknown: answered already, expired, or its instance stopped",
                None,
            ));
        };
        let Some(answer) = responses.and_then(|mut r| r.remove(KEY)) else {
            // Put back: the client may retry with its answer.
            let mut waiting = self.waiting.lock().expect("rounds lock");
            waiting.insert(state.to_owned(), round);
            return Err(ErrorData::invalid_params(
                format!("inputResponses must answer '{KEY}'"),
                None,
            ));
        };
        let _ = round.answer.send(answer);
        self.next(user, round.running).await
    }

    /// Waits for the call's result (a protocol error stays one) or its next question.
    async fn next(
        &self,
        user: &UserId,
        mut running: Running,
    ) -> Result<CallToolResponse, ErrorData> {
        tokio::select! {
            result = &mut running.result => match result {
                Ok(answer) => answer,
                Err(_) => Ok(CallToolResult::error(vec![rmcp::model::ContentBlock::text("the call stopped")]).into()),
            },
            Some(question) = running.questions.recv() => {
                let (request, answer) = question.split();
                let state = format!("{STATE_PREFIX}{}", self.new_state_id());
                self.waiting.lock().expect("rounds lock").insert(
                    state.clone(),
                    Waiting { user: user.clone(), running, answer },
                );
                self.expire(state.clone());
                Ok(InputRequiredResult::new(
                    Some([(KEY.to_owned(), request)].into_iter().collect()),
                    Some(state),
                )
                .into())
            }
        }
    }

    /// A new round's id: its first 64 bits name this instance, so a retry that reaches
    /// another one is handed here.
    fn new_state_id(&self) -> uuid::Uuid {
        match &self.elsewhere {
            Some(elsewhere) => elsewhere.new_id(),
            None => uuid::Uuid::new_v4(),
        }
    }

    /// Drops the round if nobody resumed it in time (its call is cancelled).
    fn expire(&self, state: String) {
        let (waiting, ttl) = (self.waiting.clone(), self.ttl);
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            waiting.lock().expect("rounds lock").remove(&state);
        });
    }
}
