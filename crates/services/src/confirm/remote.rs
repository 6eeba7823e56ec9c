//! Confirmations across instances: an approval for a call another instance holds is
//! forwarded to it and its answer awaited, and its record changes are relayed here.

use serde_json::Value;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{Confirmations, ForwardAnswer, TOOL_CALL_EVENT, tool_call_event};
use crate::cluster::{ConfirmFailure, Note};
use crate::domain::{InstanceId, ToolCallRecord, UserId};
use crate::error::{Error, Resource, Result};

impl From<&Error> for ConfirmFailure {
    fn from(error: &Error) -> Self {
        match error {
            Error::NotFound(Resource::Message, _) => ConfirmFailure::MessageNotFound,
            Error::NotFound(Resource::ToolCall, _) => ConfirmFailure::ToolCallNotFound,
            Error::AlreadySettled(_) => ConfirmFailure::AlreadySettled,
            Error::HeldElsewhere => ConfirmFailure::HeldElsewhere,
            other => ConfirmFailure::Failed(other.to_string()),
        }
    }
}

impl ConfirmFailure {
    fn into_error(self, message: Uuid, call_id: &str) -> Error {
        match self {
            ConfirmFailure::MessageNotFound => {
                Error::NotFound(Resource::Message, message.to_string())
            }
            ConfirmFailure::ToolCallNotFound => {
                Error::NotFound(Resource::ToolCall, call_id.to_owned())
            }
            ConfirmFailure::AlreadySettled => Error::AlreadySettled(call_id.to_owned()),
            ConfirmFailure::HeldElsewhere => Error::HeldElsewhere,
            ConfirmFailure::Failed(text) => {
                Error::Unexpected(anyhow::anyhow!("on the instance holding the call: {text}"))
            }
        }
    }
}

impl Confirmations {
    /// A confirmation another instance forwarded here, because this one holds the call.
    pub(crate) async fn confirm_forwarded(
        &self,
        user: &UserId,
        message: Uuid,
        call_id: &str,
        approved: bool,
    ) -> ForwardAnswer {
        self.decide(user, message, call_id, approved, false)
            .await
            .map(drop)
            .map_err(|e| ConfirmFailure::from(&e))
    }

    /// The answer to a confirmation this instance forwarded.
    pub(crate) fn forward_answered(&self, request: Uuid, answer: ForwardAnswer) {
        if let Some(waiting) = self
            .forwarded
            .lock()
            .expect("forwarded lock")
            .remove(&request)
        {
            let _ = waiting.send(answer);
        }
    }

    /// Asks the instance holding the call to decide it, then reads what it stored.
    pub(super) async fn forward(
        &self,
        owner: InstanceId,
        user: &UserId,
        message: Uuid,
        call_id: &str,
        approved: bool,
    ) -> Result<ToolCallRecord> {
        let cluster = &self.deps.cluster;
        if !cluster.can_forward() {
            return Err(Error::HeldElsewhere);
        }
        let request = Uuid::now_v7();
        let (answer, answered) = oneshot::channel();
        self.forwarded
            .lock()
            .expect("forwarded lock")
            .insert(request, answer);
        cluster.tell(Note::ConfirmCall {
            request,
            to: owner,
            user: user.to_string(),
            message,
            call_id: call_id.to_owned(),
            approved,
        });
        let answer = tokio::time::timeout(cluster.forward_timeout(), answered).await;
        self.forwarded
            .lock()
            .expect("forwarded lock")
            .remove(&request);
        match answer {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(failure))) => return Err(failure.into_error(message, call_id)),
            _ => {
                tracing::warn!(%owner, %message, "the instance holding the call did not answer a forwarded confirmation");
                return Err(Error::HeldElsewhere);
            }
        }
        tracing::info!(%owner, %message, call_id, "confirmation forwarded to the instance holding the call");
        let stored = self.stored(user, message).await?;
        stored
            .tool_calls
            .into_iter()
            .find(|c| c.id == call_id)
            .ok_or_else(|| Error::NotFound(Resource::ToolCall, call_id.to_owned()))
    }

    /// Another instance changed a record: users with an event stream here see it too.
    pub(crate) async fn relay_change(
        &self,
        user: &UserId,
        message: Uuid,
        call_id: &str,
        record: Option<&Value>,
    ) {
        if !self.deps.events.is_watched(user) {
            return;
        }
        if let Some(record) = record {
            self.deps
                .events
                .publish(user, TOOL_CALL_EVENT, tool_call_event(message, record));
            return;
        }
        match self.deps.store.messages().get(user, message).await {
            Ok(Some(stored)) => {
                if let Some(record) = stored.tool_calls.iter().find(|c| c.id == call_id) {
                    self.deps.events.publish(
                        user,
                        TOOL_CALL_EVENT,
                        tool_call_event(message, record),
                    );
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "a tool call change from another instance was not relayed")
            }
        }
    }
}
