//! What the two actor families (connections in [`crate::pool`], confirmations in
//! [`crate::confirm`]) share about ractor itself.

use ractor::{ActorRef, ActorStatus, Message};

/// Whether an actor takes messages. `Starting` counts: `Actor::spawn` returns before ractor
/// marks an actor `Running`, and treating it as gone made a registry start a second actor
/// for the same key whenever two first requests raced (`loadtest soak` found two stdio
/// processes per server, one of them outliving every connection).
pub(crate) fn is_alive<M: Message>(actor: &ActorRef<M>) -> bool {
    matches!(
        actor.get_status(),
        ActorStatus::Starting | ActorStatus::Running | ActorStatus::Upgrading
    )
}
