//! Questions a server asks during a REST, chat, gRPC or approved call (elicitation),
//! parked for the user like a confirmation: announced on the user's event stream as
//! `mcp.elicitation.requested`, answered with `POST /api/elicitations/{id}`, cancelled when
//! `elicitation.timeout_secs` pass. Only the question's own user can answer it; nobody
//! answers on their behalf.
//!
//! Questions live on the instance whose connection asked them (the server waits on that
//! connection); an answer sent to another instance finds nothing there (404).

// Elicitation's parameters are not deprecated, but the sampling half of `Downstream` is.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction,
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::parked::forward::Forwarder;
use super::parked::{ParkLimits, Parked};
use super::sampling::Sampling;
use crate::cluster::{ParkedFailure, ParkedKind};
use crate::domain::{McpServer, SamplingSettings, UserId};
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::mcp::downstream::Downstream;

/// What the user answers.
pub struct Answer {
    pub action: ElicitationAction,
    pub content: Option<Value>,
}

/// The questions waiting for their users on this instance (for a form: the schema its
/// content must match).
#[derive(Clone)]
pub struct Elicitations {
    pending: Parked<Option<Value>, Answer>,
    events: Arc<EventHub>,
    timeout: Duration,
    limits: ParkLimits,
    sampling: Sampling,
    /// Answers to questions another instance holds go there.
    forward: Forwarder,
}

impl Elicitations {
    pub fn new(
        events: Arc<EventHub>,
        timeout: Duration,
        limits: ParkLimits,
        sampling: Sampling,
        forward: Forwarder,
    ) -> Self {
        Self {
            pending: Parked::new(forward.me()),
            forward,
            events,
            timeout,
            limits,
            sampling,
        }
    }

    /// Who answers for a call to `server` by its user.
    pub(crate) fn for_user(&self, server: &McpServer) -> Arc<dyn Downstream> {
        Arc::new(UserAsked {
            elicitations: self.clone(),
            user: server.user_id.clone(),
            server: server.id,
            sampling: server.spec.sampling.clone(),
        })
    }

    /// An answer as the API takes it: `action` is `accept`, `decline` or `cancel`, and
    /// only `accept` carries content.
    pub async fn answer_as_sent(
        &self,
        user: &UserId,
        id: &str,
        action: &str,
        content: Option<Value>,
    ) -> Result<()> {
        let action = match action {
            "accept" => ElicitationAction::Accept,
            "decline" => ElicitationAction::Decline,
            "cancel" => ElicitationAction::Cancel,
            other => {
                return Err(Error::validation(format!(
                    "action '{other}' is not one of accept, decline, cancel"
                )));
            }
        };
        if action != ElicitationAction::Accept && content.is_some() {
            return Err(Error::validation("content goes only with accept"));
        }
        self.answer(user, id, Answer { action, content }).await
    }

    /// `POST /api/elicitations/{id}`: the content of an `accept` must match the schema.
    /// A field the user left out that the schema gives a default gets that default
    /// (SEP-1034), so the server receives what the user was shown as chosen.
    /// A question another instance holds gets the answer there (checked there).
    pub async fn answer(&self, user: &UserId, id: &str, answer: Answer) -> Result<()> {
        let sent = json!({"action": answer.action, "content": answer.content});
        if let Some(outcome) = self.answer_here(user, id, answer) {
            return outcome;
        }
        self.forward
            .forward(user, ParkedKind::Elicitation, id, sent)
            .await
            .unwrap_or_else(|| Err(Error::NotFound(Resource::Elicitation, id.to_owned())))
    }

    /// An answer another instance forwarded here.
    pub(crate) fn answer_forwarded(
        &self,
        user: &UserId,
        id: &str,
        sent: Value,
    ) -> std::result::Result<(), ParkedFailure> {
        let action = serde_json::from_value(sent["action"].clone());
        let Ok(action) = action else {
            return Err(ParkedFailure::Refused("an unreadable answer".into()));
        };
        let content = Some(sent["content"].clone()).filter(|c| !c.is_null());
        ParkedFailure::verdict(self.answer_here(user, id, Answer { action, content }))
    }

    /// `None` when no question `id` of `user` waits here.
    fn answer_here(&self, user: &UserId, id: &str, answer: Answer) -> Option<Result<()>> {
        let decide = |schema: &Option<Value>| {
            if answer.action != ElicitationAction::Accept {
                return Ok(answer);
            }
            let mut content = answer.content.unwrap_or_else(|| json!({}));
            if let Some(schema) = schema {
                fill_defaults(schema, &mut content);
                if let Ok(validator) = jsonschema::validator_for(schema) {
                    let problems = crate::pool::schema_problems(&validator, &content, "content");
                    if !problems.is_empty() {
                        return Err(Error::InvalidArguments(problems));
                    }
                }
            }
            Ok(Answer {
                action: ElicitationAction::Accept,
                content: Some(content),
            })
        };
        self.pending.answer(user, id, decide)
    }

    async fn ask(
        &self,
        user: &UserId,
        server: Uuid,
        params: ElicitRequestParams,
    ) -> std::result::Result<ElicitResult, ErrorData> {
        let expires_at: DateTime<Utc> =
            Utc::now() + chrono::Duration::from_std(self.timeout).unwrap_or_default();
        let (schema, shown) = match &params {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let schema = serde_json::to_value(requested_schema).unwrap_or(Value::Null);
                (
                    Some(schema.clone()),
                    json!({"mode": "form", "message": message, "requestedSchema": schema}),
                )
            }
            // The URL was judged where the question arrived (mcp::handler).
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                (None, json!({"mode": "url", "message": message, "url": url}))
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "an elicitation mode this service does not know",
                    None,
                ));
            }
        };
        let waiting = self
            .pending
            .park(user, server, schema, self.limits)
            .map_err(|refusal| {
                ErrorData::invalid_request(format!("question refused: {refusal}"), None)
            })?;
        let id = waiting.id;
        let mut data = shown;
        data["id"] = json!(id);
        data["serverId"] = json!(server);
        data["expiresAt"] = json!(expires_at);
        self.events.publish(user, "mcp.elicitation.requested", data);
        // Nobody answered in time: the question is withdrawn, as a cancel.
        let answer = self
            .pending
            .wait(waiting, self.timeout)
            .await
            .unwrap_or(Answer {
                action: ElicitationAction::Cancel,
                content: None,
            });
        self.events.publish(
            user,
            "mcp.elicitation.completed",
            json!({"id": id, "serverId": server, "action": action_name(&answer.action)}),
        );
        let accepted = answer.action == ElicitationAction::Accept;
        let mut result = ElicitResult::new(answer.action);
        if let Some(content) = answer.content.filter(|_| accepted) {
            result = result.with_content(content);
        }
        Ok(result)
    }
}

/// Sets each top-level property the schema gives a `default` and `content` lacks
/// (elicitation schemas are flat objects of primitives).
fn fill_defaults(schema: &Value, content: &mut Value) {
    let (Some(properties), Some(content)) = (
        schema.get("properties").and_then(Value::as_object),
        content.as_object_mut(),
    ) else {
        return;
    };
    for (name, property) in properties {
        if let Some(default) = property.get("default")
            && !content.contains_key(name)
        {
            content.insert(name.clone(), default.clone());
        }
    }
}

fn action_name(action: &ElicitationAction) -> &'static str {
    match action {
        ElicitationAction::Accept => "accept",
        ElicitationAction::Decline => "decline",
        _ => "cancel",
    }
}

/// The user of a REST, chat or gRPC call, asked through their event stream.
struct UserAsked {
    elicitations: Elicitations,
    user: UserId,
    server: Uuid,
    sampling: SamplingSettings,
}

impl Downstream for UserAsked {
    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, std::result::Result<ElicitResult, ErrorData>> {
        Box::pin(self.elicitations.ask(&self.user, self.server, params))
    }

    fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, std::result::Result<CreateMessageResult, ErrorData>> {
        Box::pin(
            self.elicitations
                .sampling
                .handle(&self.user, self.server, &self.sampling, params),
        )
    }
}
