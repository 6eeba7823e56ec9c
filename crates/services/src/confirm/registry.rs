//! Which confirmation actor holds a message's calls, and for which user: the fast path
//! of every decision, and what tells another user's message from a missing one.

use std::collections::HashMap;
use std::sync::Mutex;

use ractor::ActorRef;
use uuid::Uuid;

use super::actor::ConfirmMsg;
use crate::actors::is_alive;
use crate::domain::UserId;

/// Live confirmation actors by message, with the user each belongs to.
#[derive(Default)]
pub struct Registry {
    actors: Mutex<HashMap<Uuid, (UserId, ActorRef<ConfirmMsg>)>>,
}

/// What the registry knows about a message id.
pub(super) enum Lookup {
    Mine(ActorRef<ConfirmMsg>),
    /// Live, but another user's: it must answer exactly like a missing message.
    Others,
    Absent,
}

impl Registry {
    pub(super) fn lookup(&self, user: &UserId, message: Uuid) -> Lookup {
        let actors = self.actors.lock().expect("registry lock");
        match actors.get(&message) {
            Some((_, actor)) if !is_alive(actor) => Lookup::Absent,
            Some((owner, actor)) if owner == user => Lookup::Mine(actor.clone()),
            Some(_) => Lookup::Others,
            None => Lookup::Absent,
        }
    }

    pub(super) fn insert(&self, user: UserId, message: Uuid, actor: ActorRef<ConfirmMsg>) {
        self.actors
            .lock()
            .expect("registry lock")
            .insert(message, (user, actor));
    }

    pub(super) fn remove_if(&self, message: Uuid, actor: ractor::ActorId) {
        let mut actors = self.actors.lock().expect("registry lock");
        if actors
            .get(&message)
            .is_some_and(|(_, a)| a.get_id() == actor)
        {
            actors.remove(&message);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.actors.lock().expect("registry lock").len()
    }

    pub(super) fn all(&self) -> Vec<ActorRef<ConfirmMsg>> {
        self.actors
            .lock()
            .expect("registry lock")
            .values()
            .map(|(_, actor)| actor.clone())
            .collect()
    }
}
