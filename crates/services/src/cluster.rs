//! Several instances of the service on one database.
//!
//! Each process registers a fresh [`InstanceId`] and beats a heartbeat into `instances`;
//! one that stops beating for `cluster.instance_ttl_secs` is dead. One that ended on this
//! host (its [`presence`] lock in the data directory is free) is dead at once: its row is
//! removed as a clean stop would have, at the start of the next process on that data
//! directory and at every heartbeat of the others there. Work that must have a
//! single owner (a message's open tool calls, a Xiaozhi bridge) records its owning
//! instance, so a start or a sweep only settles or takes over what dead instances held.
//!
//! Instances talk through PostgreSQL `NOTIFY` on one channel: [`Note`]s, each sent to all
//! (the ones addressed `to` a single instance are ignored by the others). On SQLite there
//! is no such channel; the service is then one instance and [`Cluster::tell`] does nothing.

mod presence;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::ClusterSettings;
use crate::domain::InstanceId;
use crate::store::{Store, StoreError};
use presence::Presence;

/// One instance as `/admin/instances` shows it.
#[derive(Debug, Clone)]
pub struct InstanceInfo {
    pub id: InstanceId,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub heartbeat_at: chrono::DateTime<chrono::Utc>,
    /// Its heartbeat is recent enough (always true for this instance).
    pub live: bool,
    /// The instance that answered.
    pub me: bool,
}

const CHANNEL: &str = "mcp_pool_cluster";

/// PostgreSQL refuses NOTIFY payloads from 8000 bytes on; what is bigger is referenced.
pub(crate) const MAX_INLINE_BYTES: usize = 7000;

/// What one instance tells the others.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Note {
    /// A new instance: the others stop assuming they are alone.
    Joined,
    /// An approval or rejection for a parked call `to` holds.
    ConfirmCall {
        request: Uuid,
        to: InstanceId,
        user: String,
        message: Uuid,
        call_id: String,
        approved: bool,
    },
    /// The answer to a `ConfirmCall`; the record itself is read from the database.
    CallConfirmed {
        request: Uuid,
        to: InstanceId,
        outcome: Result<(), ConfirmFailure>,
    },
    /// A task `to` runs was cancelled (its row says so already): stop its call.
    CancelTask { to: InstanceId, task: Uuid },
    /// A user's answer to a question or sampling request `to` holds (`id` says which).
    AnswerParked {
        request: Uuid,
        to: InstanceId,
        user: String,
        parked: ParkedKind,
        id: String,
        answer: serde_json::Value,
    },
    /// The verdict on an `AnswerParked`.
    ParkedAnswered {
        request: Uuid,
        to: InstanceId,
        verdict: Result<(), ParkedFailure>,
    },
    /// A 2026-07-28 client's retry of a round `to` holds (its call runs there): the
    /// client's `inputResponses` for `state`.
    ResumeRound {
        request: Uuid,
        to: InstanceId,
        user: String,
        state: String,
        responses: serde_json::Value,
    },
    /// Part `part` (of `parts`) of what a resumed round came to (`gateway::rounds`): a
    /// tool's result may exceed one note, so it travels in parts.
    RoundResumed {
        request: Uuid,
        to: InstanceId,
        part: u32,
        parts: u32,
        text: String,
    },
    /// A client's answers (`tasks/update`) for the questions of a task `to` runs.
    AnswerTask {
        to: InstanceId,
        task: Uuid,
        responses: serde_json::Value,
    },
    /// A ToolCallRecord changed: instances with event streams of the user relay it.
    /// The record comes along when it fits in a note; otherwise it is read from the
    /// database (its latest state then).
    ToolCallChanged {
        user: String,
        message: Uuid,
        call_id: String,
        record: Option<serde_json::Value>,
    },
    /// A server was changed or deleted: its connections elsewhere must close.
    ServerChanged { user: String, server: Uuid },
    /// Assistant bindings changed: cached bindings elsewhere must be dropped.
    BindingsChanged,
    /// A bridge was saved or deleted on the sender, which now runs it (or nobody does).
    BridgeChanged { user: String, assistant: String },
    /// An event for a user's event streams on every instance (e.g. an OAuth callback
    /// completed here while the user's stream is elsewhere).
    UserEvent {
        user: String,
        name: String,
        data: serde_json::Value,
    },
}

/// Which kind of parked request an answer is for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum ParkedKind {
    Elicitation,
    Sampling,
}

/// Why a forwarded answer to a parked request was not taken, as its instance saw it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum ParkedFailure {
    /// Not there (answered, withdrawn, another user's).
    NotFound,
    /// Content that does not match the question's schema: one line per problem.
    Invalid(Vec<String>),
    /// Anything else; the text is for the client.
    Refused(String),
}

/// Why a forwarded confirmation failed, as the owning instance saw it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum ConfirmFailure {
    MessageNotFound,
    ToolCallNotFound,
    AlreadySettled,
    /// The addressee no longer holds the call either (it moved on meanwhile).
    HeldElsewhere,
    /// Anything else; the text is for the log and the client.
    Failed(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    pub from: InstanceId,
    #[serde(flatten)]
    pub note: Note,
}

struct Inner {
    me: InstanceId,
    store: Store,
    settings: ClusterSettings,
    /// Notes to send, in order, by one task (`None` without NOTIFY).
    outbox: Option<mpsc::UnboundedSender<String>>,
    inbox: broadcast::Sender<Arc<Envelope>>,
    /// No other live instance at the last heartbeat and no note from one since: changes
    /// are not announced (a joining instance says so first).
    alone: Arc<AtomicBool>,
    stop: CancellationToken,
    /// The sending task, awaited on leave so queued notes still go out.
    sender: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The lock that tells the others on this host when this process is gone (`None`
    /// when it could not be set up: this instance is then noticed only by its silence).
    presence: Option<Arc<Presence>>,
}

#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl Cluster {
    /// Registers this process, holds its presence lock in `data_dir` and, on
    /// PostgreSQL, starts listening to the others.
    pub async fn join(
        store: Store,
        settings: ClusterSettings,
        data_dir: &Path,
    ) -> Result<Self, StoreError> {
        let me = InstanceId::generate();
        store.instances().register(me).await?;
        let presence = match Presence::hold(data_dir, me) {
            Ok(presence) => Some(Arc::new(presence)),
            Err(error) => {
                tracing::warn!(
                    %error,
                    dir = %data_dir.display(),
                    "no presence lock in the data directory: if this process is killed, the \
                     calls it holds are settled only after cluster.instance_ttl_secs"
                );
                None
            }
        };
        let stop = CancellationToken::new();
        let (inbox, _) = broadcast::channel(4096);
        let alone = Arc::new(AtomicBool::new(true));
        let mut sender = None;
        let outbox = match store.listen(CHANNEL).await? {
            Some(listener) => {
                tokio::spawn(receive(
                    listener,
                    me,
                    inbox.clone(),
                    alone.clone(),
                    stop.clone(),
                ));
                let (outbox, queue) = mpsc::unbounded_channel();
                sender = Some(tokio::spawn(send(store.clone(), queue, stop.clone())));
                Some(outbox)
            }
            None => None,
        };
        let cluster = Self {
            inner: Arc::new(Inner {
                me,
                store,
                settings,
                outbox,
                inbox,
                alone,
                stop,
                sender: std::sync::Mutex::new(sender),
                presence,
            }),
        };
        cluster.refresh_alone().await?;
        cluster.send_note(Note::Joined);
        tracing::info!(instance = %me, "joined the cluster");
        Ok(cluster)
    }

    pub fn me(&self) -> InstanceId {
        self.inner.me
    }

    /// Whether this instance can reach the others (PostgreSQL); without it an approval
    /// for another instance's parked call fails with HELD_ELSEWHERE.
    pub(crate) fn can_forward(&self) -> bool {
        self.inner.outbox.is_some()
    }

    pub fn forward_timeout(&self) -> Duration {
        Duration::from_secs(self.inner.settings.forward_timeout_secs)
    }

    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_secs(self.inner.settings.heartbeat_secs)
    }

    fn silent_since(&self) -> chrono::DateTime<chrono::Utc> {
        crate::domain::now()
            - chrono::Duration::seconds(self.inner.settings.instance_ttl_secs as i64)
    }

    /// Every instance sharing the database, as operators see them.
    pub async fn instances(&self) -> Result<Vec<InstanceInfo>, StoreError> {
        let since = self.silent_since();
        let rows = self.inner.store.instances().all().await?;
        Ok(rows
            .into_iter()
            .map(|(id, started_at, heartbeat_at)| InstanceInfo {
                id,
                started_at,
                heartbeat_at,
                live: id == self.inner.me || heartbeat_at >= since,
                me: id == self.inner.me,
            })
            .collect())
    }

    /// Instances alive now, this one included.
    pub async fn live(&self) -> Result<Vec<InstanceId>, StoreError> {
        self.inner.store.instances().live(self.silent_since()).await
    }

    pub async fn is_live(&self, instance: InstanceId) -> Result<bool, StoreError> {
        if instance == self.inner.me {
            return Ok(true);
        }
        self.inner
            .store
            .instances()
            .is_live(instance, self.silent_since())
            .await
    }

    /// Beats, removes the instances that ended on this host, then forgets instances
    /// long dead. Returns the live instances.
    pub async fn beat(&self) -> Result<Vec<InstanceId>, StoreError> {
        let instances = self.inner.store.instances();
        if !instances.beat(self.inner.me).await? {
            tracing::warn!(
                instance = %self.inner.me,
                "this instance's heartbeat had lapsed: other instances may have settled its \
                 parked calls and taken over its bridges"
            );
        }
        self.remove_ended().await?;
        instances.forget_silent(self.forgotten_before()).await?;
        self.refresh_alone().await?;
        self.live().await
    }

    /// Removes the rows of instances whose processes ended on this host without leaving
    /// (their presence locks are free), so they are dead now rather than once their
    /// heartbeat ages out.
    async fn remove_ended(&self) -> Result<(), StoreError> {
        let Some(presence) = self.inner.presence.clone() else {
            return Ok(());
        };
        let ended = match tokio::task::spawn_blocking(move || presence.ended()).await {
            Ok(Ok(ended)) => ended,
            Ok(Err(error)) => {
                tracing::warn!(%error, "the presence files of this host were not read");
                return Ok(());
            }
            Err(error) => {
                tracing::warn!(%error, "reading the presence files failed");
                return Ok(());
            }
        };
        for ended in ended {
            if self.inner.store.instances().remove(ended.instance).await? {
                tracing::warn!(
                    instance = %ended.instance,
                    "an instance on this host ended without leaving: it is dead now"
                );
            }
            ended.forget();
        }
        Ok(())
    }

    /// Rows silent since before this are deleted.
    fn forgotten_before(&self) -> chrono::DateTime<chrono::Utc> {
        self.silent_since() - chrono::Duration::seconds(60)
    }

    /// Alone only when no other instance has a row at all: one whose heartbeats merely
    /// lag (a loaded host) must still hear about changes.
    async fn refresh_alone(&self) -> Result<(), StoreError> {
        let known = self
            .inner
            .store
            .instances()
            .live(self.forgotten_before())
            .await?;
        let alone = known.iter().all(|&i| i == self.inner.me);
        self.inner.alone.store(alone, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a note would go anywhere now (callers skip preparing one otherwise).
    pub fn has_company(&self) -> bool {
        self.inner.outbox.is_some() && !self.inner.alone.load(Ordering::Relaxed)
    }

    /// Tells the other instances, if there are any; never waits. A note addressed to
    /// one instance always goes out (its sender knows that instance is live).
    pub fn tell(&self, note: Note) {
        let addressed = matches!(
            note,
            Note::ConfirmCall { .. }
                | Note::CallConfirmed { .. }
                | Note::CancelTask { .. }
                | Note::AnswerTask { .. }
                | Note::AnswerParked { .. }
                | Note::ParkedAnswered { .. }
                | Note::ResumeRound { .. }
                | Note::RoundResumed { .. }
        );
        if addressed || !self.inner.alone.load(Ordering::Relaxed) {
            self.send_note(note);
        }
    }

    fn send_note(&self, note: Note) {
        let Some(outbox) = &self.inner.outbox else {
            return;
        };
        let envelope = Envelope {
            from: self.inner.me,
            note,
        };
        match serde_json::to_string(&envelope) {
            Ok(payload) => {
                let _ = outbox.send(payload);
            }
            Err(e) => tracing::error!(error = %e, "a cluster note did not serialize"),
        }
    }

    /// Notes from the other instances (never this one's own).
    pub fn notes(&self) -> broadcast::Receiver<Arc<Envelope>> {
        self.inner.inbox.subscribe()
    }

    /// Removes this instance (a clean stop): the next sweep of any instance settles the
    /// calls it left running, without waiting out the heartbeat timeout.
    pub async fn leave(&self) {
        self.inner.stop.cancel();
        let sender = self.inner.sender.lock().expect("sender lock").take();
        if let Some(sender) = sender {
            let _ = tokio::time::timeout(Duration::from_secs(5), sender).await;
        }
        match self.inner.store.instances().remove(self.inner.me).await {
            // Without its row, the file has nothing left to say.
            Ok(_) => {
                if let Some(presence) = &self.inner.presence {
                    presence.release();
                }
            }
            // The lock, released when the process ends, still tells the next one.
            Err(e) => tracing::warn!(error = %e, "could not deregister this instance"),
        }
    }
}

/// Sends queued notes one at a time, so they arrive in the order they were told; on
/// `stop`, what is queued still goes out.
async fn send(store: Store, mut queue: mpsc::UnboundedReceiver<String>, stop: CancellationToken) {
    loop {
        let payload = tokio::select! {
            payload = queue.recv() => match payload { Some(p) => p, None => return },
            _ = stop.cancelled() => break,
        };
        notify(&store, &payload).await;
    }
    while let Ok(payload) = queue.try_recv() {
        notify(&store, &payload).await;
    }
}

async fn notify(store: &Store, payload: &str) {
    if let Err(e) = store.notify(CHANNEL, payload).await {
        tracing::warn!(error = %e, "a cluster note was not sent");
    }
}

async fn receive(
    mut listener: crate::store::NoteListener,
    me: InstanceId,
    inbox: broadcast::Sender<Arc<Envelope>>,
    alone: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    loop {
        let received = tokio::select! {
            received = listener.recv() => received,
            _ = stop.cancelled() => return,
        };
        match received {
            Ok(Some(payload)) => match serde_json::from_str::<Envelope>(&payload) {
                Ok(envelope) if envelope.from != me => {
                    alone.store(false, Ordering::Relaxed);
                    let _ = inbox.send(Arc::new(envelope));
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "an unreadable cluster note was ignored"),
            },
            Ok(None) => {
                tracing::warn!("the cluster channel reconnected; notes sent meanwhile were missed")
            }
            Err(e) => {
                tracing::warn!(error = %e, "the cluster channel failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.cancelled() => return,
                }
            }
        }
    }
}
