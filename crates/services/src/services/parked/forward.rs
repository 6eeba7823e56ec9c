//! Answers for requests parked on another instance: a question or a sampling request
//! waits on the instance whose connection asked, and its user's answer may reach any
//! instance behind a load balancer. The request's id names its instance (its first 64
//! bits are the instance's), so the answer goes to that instance as a note and its verdict
//! (answered, not found, refused with why) comes back, as forwarded approvals do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::cluster::{Cluster, Note, ParkedFailure, ParkedKind};
use crate::domain::{InstanceId, UserId};
use crate::error::{Error, Result};

/// The first 64 bits of an instance's id, which the ids it parks begin with.
pub(crate) fn prefix_of(instance: InstanceId) -> u64 {
    instance.0.as_u64_pair().0
}

/// The instance prefix a parked request's id carries.
pub(crate) fn owner_prefix(id: &str) -> Option<u64> {
    Uuid::parse_str(id).ok().map(|id| id.as_u64_pair().0)
}

/// The other live instance whose ids begin with `prefix`, when instances can talk
/// (PostgreSQL); `None` for this instance's own prefix.
pub(crate) async fn live_owner(cluster: &Cluster, prefix: u64) -> Option<InstanceId> {
    if prefix == prefix_of(cluster.me()) || !cluster.can_forward() {
        return None;
    }
    let instances = cluster.instances().await.ok()?;
    instances
        .iter()
        .find(|instance| instance.live && !instance.me && prefix_of(instance.id) == prefix)
        .map(|instance| instance.id)
}

/// What the instance holding a request said of a forwarded answer.
type Verdict = std::result::Result<(), ParkedFailure>;

#[derive(Clone)]
pub struct Forwarder {
    cluster: Cluster,
    /// Forwarded answers awaiting their verdict, by request.
    waiting: Arc<Mutex<HashMap<Uuid, oneshot::Sender<Verdict>>>>,
}

impl Forwarder {
    pub fn new(cluster: Cluster) -> Self {
        Self {
            cluster,
            waiting: Arc::default(),
        }
    }

    pub(crate) fn me(&self) -> InstanceId {
        self.cluster.me()
    }

    /// Hands `answer` to the instance that parked request `id`; `None` when no live
    /// instance did (or instances cannot talk here: SQLite).
    pub(crate) async fn forward(
        &self,
        user: &UserId,
        kind: ParkedKind,
        id: &str,
        answer: Value,
    ) -> Option<Result<()>> {
        let owner = live_owner(&self.cluster, owner_prefix(id)?).await?;
        let request = Uuid::now_v7();
        let (reply, replied) = oneshot::channel();
        self.waiting
            .lock()
            .expect("forwarded answers")
            .insert(request, reply);
        self.cluster.tell(Note::AnswerParked {
            request,
            to: owner,
            user: user.to_string(),
            parked: kind,
            id: id.to_owned(),
            answer,
        });
        let verdict = tokio::time::timeout(self.cluster.forward_timeout(), replied).await;
        self.waiting
            .lock()
            .expect("forwarded answers")
            .remove(&request);
        match verdict {
            Ok(Ok(Ok(()))) => Some(Ok(())),
            Ok(Ok(Err(ParkedFailure::NotFound))) => None,
            Ok(Ok(Err(ParkedFailure::Invalid(problems)))) => {
                Some(Err(Error::InvalidArguments(problems)))
            }
            Ok(Ok(Err(ParkedFailure::Refused(reason)))) => Some(Err(Error::Validation(reason))),
            _ => {
                tracing::warn!(%owner, "the instance holding a parked request did not answer a forwarded answer");
                Some(Err(Error::HeldElsewhere))
            }
        }
    }

    /// The verdict on an answer this instance forwarded.
    pub(crate) fn answered(&self, request: Uuid, verdict: Verdict) {
        if let Some(waiting) = self
            .waiting
            .lock()
            .expect("forwarded answers")
            .remove(&request)
        {
            let _ = waiting.send(verdict);
        }
    }
}

impl ParkedFailure {
    /// How a local answer's outcome travels back to the instance that forwarded it.
    pub(crate) fn verdict(outcome: Option<Result<()>>) -> Verdict {
        match outcome {
            None | Some(Err(Error::NotFound(..))) => Err(ParkedFailure::NotFound),
            Some(Ok(())) => Ok(()),
            Some(Err(Error::InvalidArguments(problems))) => Err(ParkedFailure::Invalid(problems)),
            Some(Err(other)) => Err(ParkedFailure::Refused(other.to_string())),
        }
    }
}
