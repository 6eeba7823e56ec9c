//! Per-user event streams (`GET /api/events`, later the chat stream).
//!
//! Every ToolCallRecord change is published here after it was written to the database.
//! Event ids are global and increasing, so a client that reconnects with `Last-Event-ID`
//! gets what it missed from a short per-user replay buffer, then live events.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::broadcast;

use crate::domain::UserId;

#[derive(Debug, Clone)]
pub struct Event {
    pub id: u64,
    pub name: &'static str,
    pub data: Value,
}

struct UserStream {
    live: broadcast::Sender<Arc<Event>>,
    recent: VecDeque<Arc<Event>>,
}

pub struct EventHub {
    next_id: AtomicU64,
    replay: usize,
    users: Mutex<HashMap<UserId, UserStream>>,
}

impl EventHub {
    pub fn new(replay: usize) -> Self {
        Self {
            next_id: AtomicU64::new(1),
            replay: replay.max(1),
            users: Mutex::new(HashMap::new()),
        }
    }

    fn stream<'a>(
        &self,
        users: &'a mut HashMap<UserId, UserStream>,
        user: &UserId,
    ) -> &'a mut UserStream {
        users.entry(user.clone()).or_insert_with(|| UserStream {
            live: broadcast::channel(self.replay).0,
            recent: VecDeque::new(),
        })
    }

    pub fn publish(&self, user: &UserId, name: &'static str, data: Value) {
        let mut users = self.users.lock().expect("event hub lock");
        let replay = self.replay;
        let event = Arc::new(Event {
            id: self.next_id.fetch_add(1, Ordering::SeqCst),
            name,
            data,
        });
        let stream = self.stream(&mut users, user);
        if stream.recent.len() == replay {
            stream.recent.pop_front();
        }
        stream.recent.push_back(event.clone());
        // No listener is fine: the replay buffer keeps it for a reconnect.
        let _ = stream.live.send(event);
    }

    /// Whether the user has a live stream here (events from elsewhere are only worth
    /// relaying then).
    pub fn is_watched(&self, user: &UserId) -> bool {
        self.users
            .lock()
            .expect("event hub lock")
            .get(user)
            .is_some_and(|stream| stream.live.receiver_count() > 0)
    }

    /// Events after `last_seen` still in the buffer, and a receiver for what comes next.
    /// Both are taken under one lock, so nothing falls between them.
    pub fn subscribe(
        &self,
        user: &UserId,
        last_seen: Option<u64>,
    ) -> (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>) {
        let mut users = self.users.lock().expect("event hub lock");
        let stream = self.stream(&mut users, user);
        let missed = match last_seen {
            Some(id) => stream
                .recent
                .iter()
                .filter(|e| e.id > id)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        (missed, stream.live.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reconnect_gets_what_it_missed_then_live_events() {
        let hub = EventHub::new(3);
        let user = UserId::parse("u").unwrap();
        for n in 0..5 {
            hub.publish(&user, "e", serde_json::json!(n));
        }
        let (missed, mut live) = hub.subscribe(&user, Some(3));
        assert_eq!(missed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![4, 5]);
        hub.publish(&user, "e", serde_json::json!(5));
        assert_eq!(live.recv().await.unwrap().id, 6);
        let other = UserId::parse("v").unwrap();
        let (missed, _) = hub.subscribe(&other, Some(0));
        assert!(missed.is_empty(), "streams are per user");
    }
}
