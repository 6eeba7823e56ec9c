//! Requests a server makes during a call, parked on this instance until their user
//! answers (a question, a sampling request): only that user can answer, once, and an
//! unanswered one is withdrawn when its time is up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use uuid::Uuid;

use crate::domain::{InstanceId, UserId};
use crate::error::Result;

pub(crate) mod forward;

struct Entry<M, A> {
    user: UserId,
    /// The server that asked.
    server: Uuid,
    /// What answering needs to check (a question's schema).
    meta: M,
    reply: oneshot::Sender<A>,
}

/// The parked requests of one kind on this instance.
pub struct Parked<M, A> {
    entries: Arc<Mutex<HashMap<Uuid, Entry<M, A>>>>,
    /// This instance's prefix, which every id parked here begins with (see `forward`).
    prefix: u64,
}

impl<M, A> Clone for Parked<M, A> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
            prefix: self.prefix,
        }
    }
}

/// How many requests may be parked at once, per user and per server of a user: a server
/// that asks in a loop must not make the instance hold its questions without end.
#[derive(Debug, Clone, Copy)]
pub struct ParkLimits {
    pub per_user: usize,
    pub per_server: usize,
}

/// A parked request's id and the answer it waits for. Dropped (its call ended, was
/// cancelled, or its wait is over), it leaves the parked requests at once, so a request
/// whose caller is gone neither holds a place under the limits nor shows to its user.
pub(crate) struct Waiting<M, A> {
    pub id: Uuid,
    answered: oneshot::Receiver<A>,
    entries: Arc<Mutex<HashMap<Uuid, Entry<M, A>>>>,
}

impl<M, A> Drop for Waiting<M, A> {
    fn drop(&mut self) {
        self.entries.lock().expect("parked lock").remove(&self.id);
    }
}

impl<M, A> Parked<M, A> {
    pub fn new(instance: InstanceId) -> Self {
        Self {
            entries: Arc::default(),
            prefix: forward::prefix_of(instance),
        }
    }

    /// Parks a request of `user`'s `server`, or says which limit it would pass.
    pub fn park(
        &self,
        user: &UserId,
        server: Uuid,
        meta: M,
        limits: ParkLimits,
    ) -> std::result::Result<Waiting<M, A>, String> {
        let id = Uuid::from_u64_pair(self.prefix, Uuid::new_v4().as_u64_pair().1);
        let (reply, answered) = oneshot::channel();
        let mut entries = self.entries.lock().expect("parked lock");
        let (mut of_user, mut of_server) = (0, 0);
        for entry in entries.values().filter(|e| e.user == *user) {
            of_user += 1;
            of_server += usize::from(entry.server == server);
        }
        if of_server >= limits.per_server {
            return Err(format!(
                "this server already has {of_server} requests waiting for its user (at most {})",
                limits.per_server
            ));
        }
        if of_user >= limits.per_user {
            // Says nothing of the user's other servers.
            return Err(
                "the user has too many requests of servers waiting; ask again later".into(),
            );
        }
        entries.insert(
            id,
            Entry {
                user: user.clone(),
                server,
                meta,
                reply,
            },
        );
        Ok(Waiting {
            id,
            answered,
            entries: self.entries.clone(),
        })
    }

    /// The answer, or `None` once `timeout` passed (the request is then withdrawn).
    pub async fn wait(&self, mut waiting: Waiting<M, A>, timeout: Duration) -> Option<A> {
        let answer = tokio::time::timeout(timeout, &mut waiting.answered).await;
        drop(waiting);
        answer.ok().and_then(Result::ok)
    }

    /// Answers `user`'s request `id` with what `decide` makes of it (or refuses with its
    /// error, leaving the request parked). `None` when there is no such request of this
    /// user here (never answered, answered already, or withdrawn).
    pub fn answer(
        &self,
        user: &UserId,
        id: &str,
        decide: impl FnOnce(&M) -> Result<A>,
    ) -> Option<Result<()>> {
        let id = Uuid::parse_str(id).ok()?;
        let mut entries = self.entries.lock().expect("parked lock");
        let entry = entries.get(&id).filter(|e| e.user == *user)?;
        let answer = match decide(&entry.meta) {
            Ok(answer) => answer,
            Err(problem) => return Some(Err(problem)),
        };
        let entry = entries.remove(&id).expect("looked up above");
        // The server may have stopped waiting meanwhile; the answer is then dropped.
        let _ = entry.reply.send(answer);
        Some(Ok(()))
    }
}
