//! What the two actor families (connections in [`crate::pool`], confirmations in
//! `mcp_pool_services::confirm`) share about ractor itself: whether an actor is alive, and
//! the bookkeeping of a supervisor that runs one child per key.

use std::collections::HashMap;
use std::time::Duration;

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, ActorStatus, Message, SpawnErr,
    SupervisionEvent,
};

/// Whether an actor takes messages. `Starting` counts: `Actor::spawn` returns before ractor
/// marks an actor `Running`, and treating it as gone made a registry start a second actor
/// for the same key whenever two first requests raced (`loadtest soak` found two stdio
/// processes per server, one of them outliving every connection).
pub fn is_alive<M: Message>(actor: &ActorRef<M>) -> bool {
    matches!(
        actor.get_status(),
        ActorStatus::Starting | ActorStatus::Running | ActorStatus::Upgrading
    )
}

/// How a supervised child ended.
pub enum Ended<K> {
    /// It stopped (its work was done, or it was asked to), with the reason it gave.
    Stopped(K, Option<String>),
    /// It failed: its supervisor decides whether to start it again.
    Crashed(K, ActorProcessingErr),
}

/// The children of a keyed supervisor: which key each live child serves. Both supervisors
/// spawn children linked to themselves through it, learn from it which child a
/// supervision event is about, and stop them all through it at the end, so the three
/// things a keyed supervisor must get right are written once.
pub struct Children<K> {
    keys: HashMap<ActorId, K>,
}

impl<K> Default for Children<K> {
    fn default() -> Self {
        Self {
            keys: HashMap::new(),
        }
    }
}

impl<K> Children<K> {
    /// Starts `actor` linked to `supervisor` (its failures come back as supervision
    /// events), serving `key`.
    pub async fn spawn<A: Actor>(
        &mut self,
        supervisor: ActorCell,
        key: K,
        actor: A,
        args: A::Arguments,
    ) -> Result<ActorRef<A::Msg>, SpawnErr> {
        let (child, _) = Actor::spawn_linked(None, actor, args, supervisor).await?;
        self.keys.insert(child.get_id(), key);
        Ok(child)
    }

    /// The child an event tells the end of, forgotten, with its id: `None` for events
    /// about anything else.
    pub fn ended(&mut self, event: SupervisionEvent) -> Option<(ActorId, Ended<K>)> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                let id = cell.get_id();
                Some((id, Ended::Stopped(self.keys.remove(&id)?, reason)))
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                let id = cell.get_id();
                Some((id, Ended::Crashed(self.keys.remove(&id)?, error)))
            }
            _ => None,
        }
    }
}

/// Stops (not kills) every child of a supervisor that is stopping, so each ends its work
/// (a connection closes its session and child process), waiting up to 10 s.
pub async fn stop_children<M: Message>(supervisor: &ActorRef<M>) {
    supervisor
        .stop_children_and_wait(Some("shutdown".into()), Some(Duration::from_secs(10)))
        .await;
}
