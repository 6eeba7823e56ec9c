//! Retries of rounds another instance holds: behind a load balancer a 2026-07-28 client's
//! retry may reach any instance, while the round's call runs on the one whose upstream
//! asked. A round's state names that instance (its id's first 64 bits, as parked requests'
//! ids do), so the retry is handed there as a note and what the round came to (the next
//! question or the call's result) comes back in notes, in parts when it is larger than one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolResponse, CallToolResult, CreateTaskResult, InputRequiredResult, InputResponses,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{Rounds, STATE_PREFIX};
use crate::cluster::{Cluster, MAX_INLINE_BYTES, Note};
use crate::domain::{InstanceId, UserId};
use crate::services::parked::forward::{live_owner, owner_prefix, prefix_of};

/// Room in a note for a part of an outcome, the note's other fields and JSON escapes
/// aside.
const PART_BYTES: usize = MAX_INLINE_BYTES / 2;

/// What a resumed round came to, as it travels between instances.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Outcome {
    Complete(CallToolResult),
    InputRequired(InputRequiredResult),
    Task(CreateTaskResult),
    Error(ErrorData),
}

impl Outcome {
    fn of(outcome: Result<CallToolResponse, ErrorData>) -> Self {
        match outcome {
            Ok(CallToolResponse::Complete(result)) => Outcome::Complete(result),
            Ok(CallToolResponse::InputRequired(asked)) => Outcome::InputRequired(asked),
            Ok(CallToolResponse::Task(task)) => Outcome::Task(task),
            Ok(_) => Outcome::Error(ErrorData::internal_error(
                "the round came to an answer this service does not know",
                None,
            )),
            Err(error) => Outcome::Error(error),
        }
    }

    fn into_response(self) -> Result<CallToolResponse, ErrorData> {
        match self {
            Outcome::Complete(result) => Ok(result.into()),
            Outcome::InputRequired(asked) => Ok(asked.into()),
            Outcome::Task(task) => Ok(task.into()),
            Outcome::Error(error) => Err(error),
        }
    }
}

/// A retry handed to another instance, waiting for what it came to.
struct Pending {
    parts: Vec<Option<String>>,
    reply: Option<oneshot::Sender<String>>,
}

#[derive(Clone)]
pub(super) struct Elsewhere {
    cluster: Cluster,
    /// How long a retry handed elsewhere is waited for (the round's call runs on until its
    /// next question or its end).
    resume_wait: Duration,
    pending: Arc<Mutex<HashMap<Uuid, Pending>>>,
}

impl Elsewhere {
    pub(super) fn new(cluster: Cluster, resume_wait: Duration) -> Self {
        Self {
            cluster,
            resume_wait,
            pending: Arc::default(),
        }
    }

    /// A round id naming this instance.
    pub(super) fn new_id(&self) -> Uuid {
        Uuid::from_u64_pair(prefix_of(self.cluster.me()), Uuid::new_v4().as_u64_pair().1)
    }

    /// The live instance holding round `state`, when that is another one and instances
    /// can talk (PostgreSQL).
    async fn holder(&self, state: &str) -> Option<InstanceId> {
        let prefix = owner_prefix(state.strip_prefix(STATE_PREFIX)?)?;
        live_owner(&self.cluster, prefix).await
    }

    /// Hands the client's retry to the instance holding its round and waits for what it
    /// came to; `None` when no other live instance holds it.
    pub(super) async fn resume(
        &self,
        user: &UserId,
        state: &str,
        responses: Option<InputResponses>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        let holder = self.holder(state).await?;
        let request = Uuid::now_v7();
        let (reply, replied) = oneshot::channel();
        self.pending.lock().expect("forwarded rounds").insert(
            request,
            Pending {
                parts: Vec::new(),
                reply: Some(reply),
            },
        );
        let responses = serde_json::to_value(responses.unwrap_or_default()).unwrap_or_default();
        self.cluster.tell(Note::ResumeRound {
            request,
            to: holder,
            user: user.to_string(),
            state: state.to_owned(),
            responses,
        });
        let came = tokio::time::timeout(self.resume_wait, replied).await;
        self.pending
            .lock()
            .expect("forwarded rounds")
            .remove(&request);
        let outcome = match came {
            Ok(Ok(text)) => serde_json::from_str::<Outcome>(&text)
                .map(Outcome::into_response)
                .unwrap_or_else(|e| {
                    Err(ErrorData::internal_error(
                        format!("the round's outcome from instance {holder} was unreadable: {e}"),
                        None,
                    ))
                }),
            _ => Err(ErrorData::internal_error(
                format!("the instance holding the round ({holder}) did not answer in time"),
                None,
            )),
        };
        Some(outcome)
    }

    /// Part of what a round this instance handed elsewhere came to.
    pub(super) fn part(&self, request: Uuid, part: u32, parts: u32, text: &str) {
        let mut pending = self.pending.lock().expect("forwarded rounds");
        let Some(waiting) = pending.get_mut(&request) else {
            return;
        };
        let (part, parts) = (part as usize, (parts as usize).max(1));
        if waiting.parts.len() != parts {
            waiting.parts = vec![None; parts];
        }
        if let Some(slot) = waiting.parts.get_mut(part) {
            *slot = Some(text.to_owned());
        }
        if waiting.parts.iter().all(Option::is_some) {
            let whole: String = waiting.parts.iter().flatten().map(String::as_str).collect();
            if let Some(reply) = waiting.reply.take() {
                let _ = reply.send(whole);
            }
        }
    }

    /// Sends `outcome` to `to` in parts that each fit a note.
    fn reply(&self, request: Uuid, to: InstanceId, outcome: Result<CallToolResponse, ErrorData>) {
        let text = serde_json::to_string(&Outcome::of(outcome)).unwrap_or_default();
        let parts = split_at_chars(&text, PART_BYTES);
        let count = parts.len() as u32;
        for (part, text) in parts.into_iter().enumerate() {
            self.cluster.tell(Note::RoundResumed {
                request,
                to,
                part: part as u32,
                parts: count,
                text: text.to_owned(),
            });
        }
    }
}

/// `text` in pieces of at most `bytes` bytes, cut between characters.
fn split_at_chars(text: &str, bytes: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text;
    while rest.len() > bytes {
        let mut cut = bytes;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (part, tail) = rest.split_at(cut);
        parts.push(part);
        rest = tail;
    }
    parts.push(rest);
    parts
}

impl Rounds {
    /// A retry another instance handed here (`Note::ResumeRound`): resumed as this
    /// instance's own, and what it came to sent back.
    pub async fn resume_forwarded(
        &self,
        request: Uuid,
        from: InstanceId,
        user: &UserId,
        state: &str,
        responses: Value,
    ) {
        let Some(elsewhere) = self.elsewhere.clone() else {
            return;
        };
        let responses: Option<InputResponses> = serde_json::from_value(responses).ok();
        let outcome = self.resume(user, state, responses).await;
        elsewhere.reply(request, from, outcome);
    }

    /// Part of what a retry handed elsewhere came to (`Note::RoundResumed`).
    pub fn forwarded_part(&self, request: Uuid, part: u32, parts: u32, text: &str) {
        if let Some(elsewhere) = &self.elsewhere {
            elsewhere.part(request, part, parts, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split_at_chars;

    #[test]
    fn an_outcome_is_cut_between_characters_and_joins_back() {
        let text = "é".repeat(10) + "abc";
        let parts = split_at_chars(&text, 5);
        assert!(parts.iter().all(|part| part.len() <= 5), "{parts:?}");
        assert_eq!(parts.concat(), text);
        assert_eq!(split_at_chars("", 5), vec![""]);
    }
}
