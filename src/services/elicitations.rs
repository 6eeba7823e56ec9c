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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::domain::UserId;
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::mcp::downstream::Downstream;

/// What the user answers.
pub struct Answer {
    pub action: ElicitationAction,
    pub content: Option<Value>,
}

struct Pending {
    user: UserId,
    /// For a form: the schema the content must match.
    schema: Option<Value>,
    reply: oneshot::Sender<Answer>,
}

/// The questions waiting for their users on this instance.
#[derive(Clone)]
pub struct Elicitations {
    pending: Arc<Mutex<HashMap<Uuid, Pending>>>,
    events: Arc<EventHub>,
    timeout: Duration,
}

impl Elicitations {
    pub fn new(events: Arc<EventHub>, timeout: Duration) -> Self {
        Self {
            pending: Arc::default(),
            events,
            timeout,
        }
    }

    /// Who answers for `user`'s call to `server`.
    pub fn for_user(&self, user: &UserId, server: Uuid) -> Arc<dyn Downstream> {
        Arc::new(UserAsked {
            elicitations: self.clone(),
            user: user.clone(),
            server,
        })
    }

    /// An answer as the API takes it: `action` is `accept`, `decline` or `cancel`, and
    /// only `accept` carries content.
    pub fn answer_as_sent(
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
        self.answer(user, id, Answer { action, content })
    }

    /// `POST /api/elicitations/{id}`: the content of an `accept` must match the schema.
    pub fn answer(&self, user: &UserId, id: &str, answer: Answer) -> Result<()> {
        let not_found = || Error::NotFound(Resource::Elicitation, id.to_owned());
        let id = Uuid::parse_str(id).map_err(|_| not_found())?;
        let mut pending = self.pending.lock().expect("elicitations lock");
        let Some(question) = pending.get(&id).filter(|q| q.user == *user) else {
            return Err(not_found());
        };
        if answer.action == ElicitationAction::Accept
            && let Some(schema) = &question.schema
        {
            let content = answer.content.clone().unwrap_or_else(|| json!({}));
            if let Ok(validator) = jsonschema::validator_for(schema) {
                let problems = crate::pool::schema_problems(&validator, &content, "content");
                if !problems.is_empty() {
                    return Err(Error::InvalidArguments(problems));
                }
            }
        }
        let question = pending.remove(&id).expect("checked above");
        // The server may have stopped waiting meanwhile; the answer is then dropped.
        let _ = question.reply.send(answer);
        Ok(())
    }

    async fn ask(
        &self,
        user: &UserId,
        server: Uuid,
        params: ElicitRequestParams,
    ) -> std::result::Result<ElicitResult, ErrorData> {
        let id = Uuid::new_v4();
        let expires_at: DateTime<Utc> =
            Utc::now() + chrono::Duration::from_std(self.timeout).unwrap_or_default();
        let (reply, answered) = oneshot::channel();
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
        self.pending.lock().expect("elicitations lock").insert(
            id,
            Pending {
                user: user.clone(),
                schema,
                reply,
            },
        );
        let mut data = shown;
        data["id"] = json!(id);
        data["serverId"] = json!(server);
        data["expiresAt"] = json!(expires_at);
        self.events.publish(user, "mcp.elicitation.requested", data);
        let answer = tokio::time::timeout(self.timeout, answered).await;
        self.pending.lock().expect("elicitations lock").remove(&id);
        let answer = match answer {
            Ok(Ok(answer)) => answer,
            // Nobody answered in time: the question is withdrawn, as a cancel.
            _ => Answer {
                action: ElicitationAction::Cancel,
                content: None,
            },
        };
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
        _params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, std::result::Result<CreateMessageResult, ErrorData>> {
        Box::pin(async {
            Err(ErrorData::invalid_request(
                "sampling is only passed to gateway clients that declare it; this call's user has no model to offer",
                None,
            ))
        })
    }
}
