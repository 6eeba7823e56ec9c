//! Requests a server makes during a call, parked on this instance until their user
//! answers (a question, a sampling request): only that user can answer, once, and an
//! unanswered one is withdrawn when its time is up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use uuid::Uuid;

use crate::domain::UserId;
use crate::error::Result;

struct Entry<M, A> {
    user: UserId,
    /// What answering needs to check (a question's schema).
    meta: M,
    reply: oneshot::Sender<A>,
}

/// The parked requests of one kind on this instance.
pub struct Parked<M, A> {
    entries: Arc<Mutex<HashMap<Uuid, Entry<M, A>>>>,
}

impl<M, A> Clone for Parked<M, A> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
        }
    }
}

impl<M, A> Default for Parked<M, A> {
    fn default() -> Self {
        Self {
            entries: Arc::default(),
        }
    }
}

/// A parked request's id and the answer it waits for.
pub struct Waiting<A> {
    pub id: Uuid,
    answered: oneshot::Receiver<A>,
}

impl<M, A> Parked<M, A> {
    pub fn park(&self, user: &UserId, meta: M) -> Waiting<A> {
        let id = Uuid::new_v4();
        let (reply, answered) = oneshot::channel();
        self.entries.lock().expect("parked lock").insert(
            id,
            Entry {
                user: user.clone(),
                meta,
                reply,
            },
        );
        Waiting { id, answered }
    }

    /// The answer, or `None` once `timeout` passed (the request is then withdrawn).
    pub async fn wait(&self, waiting: Waiting<A>, timeout: Duration) -> Option<A> {
        let answer = tokio::time::timeout(timeout, waiting.answered).await;
        self.entries
            .lock()
            .expect("parked lock")
            .remove(&waiting.id);
        answer.ok().and_then(Result::ok)
    }

    /// Answers `user`'s request `id` after `check` accepts it. `None` when there is no
    /// such request of this user here (never answered, answered already, or withdrawn).
    pub fn answer(
        &self,
        user: &UserId,
        id: &str,
        check: impl FnOnce(&M) -> Result<()>,
        answer: A,
    ) -> Option<Result<()>> {
        let id = Uuid::parse_str(id).ok()?;
        let mut entries = self.entries.lock().expect("parked lock");
        let entry = entries.get(&id).filter(|e| e.user == *user)?;
        if let Err(problem) = check(&entry.meta) {
            return Some(Err(problem));
        }
        let entry = entries.remove(&id).expect("looked up above");
        // The server may have stopped waiting meanwhile; the answer is then dropped.
        let _ = entry.reply.send(answer);
        Some(Ok(()))
    }
}
