//! Tool calls run as tasks: the call goes on after the request that started it has been
//! answered, and its outcome is kept as a row for `ttl_secs`, so any instance answers for
//! it (`tasks/get`, `GET /api/tasks/{id}`) and a client may poll, come back later or
//! cancel from anywhere.
//!
//! The call runs on the instance that started it. Every settlement is a conditional write
//! (`TaskRepo::settle` moves only an open task), so the call's end, a cancel from any
//! instance and the sweep of a stopped instance's tasks cannot overwrite each other: the
//! first wins. A task whose instance stopped is failed by the next heartbeat's sweep
//! (`settle_orphans`), on any instance, or by the same instance when it starts again.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use uuid::Uuid;

use running::{Run, Shared, Snapshot};
pub use running::{TaskHandle, Waiting};

use crate::cluster::{Cluster, Note};
use crate::config::TaskSettings;
use crate::domain::{AssistantId, InstanceId, TaskOrigin, TaskStatus, UserId};
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::store::{Store, StoreError, StoredTask};

mod running;

/// The event a user's streams get whenever one of their tasks changes status.
pub const TASK_UPDATED: &str = "task.updated";

/// How a task's call ended.
#[derive(Debug, Clone)]
pub enum TaskEnd {
    /// The call's result (a tool that reported an error is still a result).
    Completed(Value),
    /// The call could not be made or did not finish: a JSON-RPC error object
    /// (`{code, message, data}`), `data.code` the service's stable code.
    Failed(Value),
    /// The server asked the caller for input in a round (2026-07-28) before it decided
    /// to make a task of the call (an `InputRequiredResult`): the caller waiting inline
    /// takes it and retries with its answers. A task already made cannot give it back,
    /// and fails saying so.
    Asked(Value),
}

impl TaskEnd {
    /// A service error as a failed task keeps it.
    pub fn failure(error: &Error) -> Self {
        Self::failed(-32603, error.to_string(), error.code())
    }

    pub fn failed(code: i32, message: impl Into<String>, stable: &str) -> Self {
        TaskEnd::Failed(error_object(code, message.into(), stable))
    }

    /// The row's status, result and error for this end.
    fn into_row(self) -> (TaskStatus, Option<Value>, Option<Value>) {
        match self {
            TaskEnd::Completed(result) => (TaskStatus::Completed, Some(result), None),
            TaskEnd::Failed(error) => (TaskStatus::Failed, None, Some(error)),
            TaskEnd::Asked(_) => (
                TaskStatus::Failed,
                None,
                Some(error_object(
                    -32603,
                    "the server asked for input in a round after the call had become a task; \
                     call the tool again"
                        .into(),
                    "MCP_PROTOCOL_ERROR",
                )),
            ),
        }
    }
}

fn error_object(code: i32, message: String, stable: &str) -> Value {
    json!({"code": code, "message": message, "data": {"code": stable}})
}

/// What a task's call is.
pub type TaskWork = Pin<Box<dyn Future<Output = TaskEnd> + Send>>;

/// Makes the work that follows on an orphaned task's server task (`None`: it cannot be).
pub type FollowOn = dyn Fn(&StoredTask, TaskHandle) -> Option<TaskWork> + Send + Sync;

/// A task about to be started: whose it is and what it calls.
pub struct NewTask {
    pub user: UserId,
    /// A gateway client's task: only clients of the same assistant see it.
    pub assistant: Option<AssistantId>,
    pub origin: TaskOrigin,
    pub server_name: String,
    pub tool_name: String,
}

/// A call that outlasted its inline wait, on its way to becoming a task.
struct Handover {
    id: Uuid,
    new: NewTask,
    ended: oneshot::Receiver<TaskEnd>,
    stored: oneshot::Sender<bool>,
    shared: Arc<Shared>,
}

/// What `Tasks::start` gives back.
pub enum Started {
    /// The call finished within the inline wait; no task was made.
    Inline(TaskEnd),
    Task(Box<StoredTask>),
}

#[derive(Clone)]
pub struct Tasks {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    events: Arc<EventHub>,
    cluster: Cluster,
    settings: TaskSettings,
    /// The calls this instance runs, by task id.
    running: Mutex<HashMap<Uuid, Arc<Shared>>>,
}

impl Tasks {
    pub fn new(
        store: Store,
        events: Arc<EventHub>,
        cluster: Cluster,
        settings: TaskSettings,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                events,
                cluster,
                settings,
                running: Mutex::default(),
            }),
        }
    }

    /// How long a task's call may run.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.inner.settings.call_timeout_secs)
    }

    /// How long a gateway client's call may take before it becomes a task.
    pub fn inline_wait(&self) -> Duration {
        Duration::from_millis(self.inner.settings.inline_wait_ms)
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.inner.settings.ttl_secs)
    }

    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.inner.settings.poll_interval_ms)
    }

    /// Runs `work` as a task of `new.user`. With `inline`, a call that ends within that
    /// time is answered as it is and leaves no row; otherwise the task is stored (before
    /// this returns, so a `tasks/get` for it is answered at once) and the call goes on.
    /// A task past the user's `max_open_per_user` is refused: without `inline` before the
    /// call starts, with it once the call outlasts the wait (the call is then stopped).
    /// `work` gets the task's handle: its cancellation, its status message, and the
    /// questions it puts to the client (`input_required`).
    pub async fn start(
        &self,
        new: NewTask,
        inline: Option<Duration>,
        work: impl FnOnce(TaskHandle) -> TaskWork,
    ) -> Result<Started> {
        let Some(wait) = inline else {
            return self.start_stored(new, work).await;
        };
        let id = Uuid::new_v4();
        let shared = Arc::new(Shared::default());
        let (ended_tx, mut ended) = oneshot::channel::<TaskEnd>();
        let (stored_tx, stored) = oneshot::channel::<bool>();
        self.launch_work(
            Run {
                id,
                shared: shared.clone(),
                ended: ended_tx,
                stored,
            },
            work,
        );
        // A caller that goes away while it waits inline takes the call with it.
        let abandon = shared.cancel.clone().drop_guard();
        // The inline wait ends early when the server made a task of the call itself
        // (`TaskHandle::becomes_task_when`): it decided the call is long.
        let inline_end = tokio::select! {
            end = tokio::time::timeout(wait, &mut ended) => end.ok(),
            () = shared.promoted.notified() => None,
        };
        abandon.disarm();
        if let Some(end) = inline_end {
            return match end {
                Ok(end) => Ok(Started::Inline(end)),
                Err(_) => Err(Error::Unexpected(anyhow::anyhow!(
                    "the call's task ended without an outcome"
                ))),
            };
        }
        // From here the task is made whether or not its caller still waits: a row written
        // and a call left running without one would be a task nobody can see end.
        let handover = Handover {
            id,
            new,
            ended,
            stored: stored_tx,
            shared,
        };
        tokio::spawn(self.clone().hand_over(handover))
            .await
            .map_err(|_| Error::Unexpected(anyhow::anyhow!("making the task failed")))?
    }

    /// Starts `work` as the call of `run`'s task, registered here at once: a question it
    /// asks before the row exists is answered here too.
    fn launch_work(&self, run: Run, work: impl FnOnce(TaskHandle) -> TaskWork) {
        let handle = TaskHandle {
            id: run.id,
            shared: run.shared.clone(),
            tasks: self.clone(),
        };
        let call = work(handle);
        self.launch(run, call);
    }

    /// A task that is one from the start: its row first (refused past the user's limit,
    /// nothing run), then its call, whose every change goes to the row.
    async fn start_stored(
        &self,
        new: NewTask,
        work: impl FnOnce(TaskHandle) -> TaskWork,
    ) -> Result<Started> {
        let id = Uuid::new_v4();
        let task = self.store_new(id, new, Snapshot::default()).await?;
        // Its row exists: every change goes to it.
        let shared = Arc::new(Shared::adopted(None));
        self.launch_work(Run::stored(id, shared), work);
        Ok(Started::Task(Box::new(task)))
    }

    /// The call outlasted the inline wait: the row, unless the call ended meanwhile and
    /// its caller takes the end as it is.
    async fn hand_over(self, handover: Handover) -> Result<Started> {
        let Handover {
            id,
            new,
            mut ended,
            stored,
            shared,
        } = handover;
        // From here the call's end goes to the row: an end sent before `close` is taken
        // now, any later send fails and the runner waits for the row instead.
        ended.close();
        if let Ok(end) = ended.try_recv() {
            let _ = stored.send(false);
            return Ok(Started::Inline(end));
        }
        // What the call said and asked so far goes into the row; later changes are
        // written as they come (`TaskHandle`).
        let _writing = shared.writing.lock().await;
        let snapshot = {
            let mut state = shared.state.lock().expect("task state");
            state.stored = true;
            state.snapshot()
        };
        match self.store_new(id, new, snapshot).await {
            Ok(task) => {
                let _ = stored.send(true);
                Ok(Started::Task(Box::new(task)))
            }
            // Past the user's limit (or not stored): the call is stopped.
            Err(error) => {
                self.forget(id);
                shared.cancel.cancel();
                let _ = stored.send(false);
                Err(error)
            }
        }
    }

    /// Stores a new open task, unless its user has `max_open_per_user` open, and tells the
    /// user's streams.
    async fn store_new(&self, id: Uuid, new: NewTask, snapshot: Snapshot) -> Result<StoredTask> {
        let now = crate::domain::now();
        let ttl = chrono::Duration::from_std(self.ttl()).unwrap_or(chrono::Duration::MAX);
        let Snapshot {
            status,
            status_message,
            input_requests,
            upstream,
        } = snapshot;
        let task = StoredTask {
            id,
            user_id: new.user,
            assistant_id: new.assistant,
            origin: new.origin,
            server_name: new.server_name,
            tool_name: new.tool_name,
            status,
            status_message,
            result: None,
            error: None,
            input_requests,
            instance_id: self.inner.cluster.me(),
            created_at: now,
            updated_at: now,
            expires_at: now + ttl,
            upstream,
        };
        let max = self.inner.settings.max_open_per_user;
        if !self.inner.store.tasks().insert_within(&task, max).await? {
            return Err(Error::TooManyTasks(max));
        }
        self.announce(&task);
        Ok(task)
    }

    /// Writes a call's end on its task; a database outage is waited out (every second,
    /// up to the task's time to live), so an acknowledged task does not lose its result.
    async fn settle(&self, id: Uuid, end: TaskEnd) {
        let (status, result, error) = end.into_row();
        let deadline = tokio::time::Instant::now() + self.ttl();
        loop {
            let written = self
                .inner
                .store
                .tasks()
                .settle(id, status, None, result.clone(), error.clone())
                .await;
            match written {
                Ok(true) => return self.announce_row(id).await,
                // Cancelled or failed by a sweep meanwhile: that stands.
                Ok(false) => return,
                Err(StoreError::Unavailable(reason)) if tokio::time::Instant::now() < deadline => {
                    tracing::warn!(task = %id, %reason, "a task's outcome waits for the database");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(error) => {
                    tracing::error!(task = %id, %error, "a task's outcome could not be stored");
                    return;
                }
            }
        }
    }

    /// A task of `user` (and, for a gateway client, of `assistant`); any other is not
    /// found, as one that never existed or expired.
    pub async fn get(
        &self,
        user: &UserId,
        assistant: Option<&AssistantId>,
        id: &str,
    ) -> Result<StoredTask> {
        let missing = || Error::NotFound(Resource::Task, id.to_owned());
        let parsed = Uuid::parse_str(id).map_err(|_| missing())?;
        let task = self
            .inner
            .store
            .tasks()
            .get(parsed)
            .await?
            .ok_or_else(missing)?;
        let visible = task.user_id == *user
            && assistant.is_none_or(|assistant| task.assistant_id.as_ref() == Some(assistant));
        if !visible {
            return Err(missing());
        }
        Ok(task)
    }

    /// A user's tasks, newest first.
    pub async fn list(&self, user: &UserId, limit: u64) -> Result<Vec<StoredTask>> {
        Ok(self.inner.store.tasks().list(user, limit).await?)
    }

    /// Cancels an open task wherever it runs; a task already settled stays as it is.
    /// Returns the task as it stands after.
    pub async fn cancel(
        &self,
        user: &UserId,
        assistant: Option<&AssistantId>,
        id: &str,
    ) -> Result<StoredTask> {
        let task = self.get(user, assistant, id).await?;
        if task.status.is_terminal() {
            return Ok(task);
        }
        let tasks = self.inner.store.tasks();
        let cancelled = tasks
            .settle(
                task.id,
                TaskStatus::Cancelled,
                Some("cancelled by the client".into()),
                None,
                None,
            )
            .await?;
        if cancelled {
            if task.instance_id == self.inner.cluster.me() {
                self.stop_here(task.id);
            } else {
                self.inner.cluster.tell(Note::CancelTask {
                    to: task.instance_id,
                    task: task.id,
                });
            }
        }
        let task = tasks
            .get(task.id)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::Task, id.to_owned()))?;
        if cancelled {
            self.announce(&task);
        }
        Ok(task)
    }

    /// Stops the call of a task this instance runs (its row is settled already).
    pub(crate) fn stop_here(&self, id: Uuid) {
        if let Some(shared) = self.forget(id) {
            shared.cancel.cancel();
        }
    }

    /// Answers what task `id` waits for (`tasks/update`): keys it does not wait for are
    /// ignored. A task another instance runs gets the answers there.
    pub async fn answer(
        &self,
        user: &UserId,
        assistant: Option<&AssistantId>,
        id: &str,
        responses: serde_json::Map<String, Value>,
    ) -> Result<()> {
        let task = self.get(user, assistant, id).await?;
        if task.status.is_terminal() || responses.is_empty() {
            return Ok(());
        }
        if task.instance_id == self.inner.cluster.me() {
            self.answer_here(task.id, responses).await;
        } else {
            self.inner.cluster.tell(Note::AnswerTask {
                to: task.instance_id,
                task: task.id,
                responses: Value::Object(responses),
            });
        }
        Ok(())
    }

    /// Follows on the open tasks of instances no longer live whose server made a task of
    /// the call (`follow_on` makes the work, `None` when it cannot), fails the others, and
    /// drops expired rows.
    pub(crate) async fn settle_orphans(
        &self,
        live: &[InstanceId],
        follow_on: &FollowOn,
    ) -> Result<usize> {
        let tasks = self.inner.store.tasks();
        let mut settled = 0;
        for orphan in tasks.orphaned(live).await? {
            if orphan.upstream.is_some() && self.adopt(&orphan, follow_on).await? {
                continue;
            }
            let error = error_object(
                -32603,
                "the instance of the service that ran this task stopped before the call ended"
                    .into(),
                "TASK_INSTANCE_STOPPED",
            );
            if tasks
                .settle(orphan.id, TaskStatus::Failed, None, None, Some(error))
                .await?
                && let Some(task) = tasks.get(orphan.id).await?
            {
                settled += 1;
                self.announce(&task);
            }
        }
        if settled > 0 {
            tracing::warn!(settled, "failed tasks whose instance stopped");
        }
        let dropped = tasks.drop_expired().await?;
        if dropped > 0 {
            tracing::debug!(dropped, "dropped expired tasks");
        }
        Ok(settled)
    }

    /// Takes over an orphaned task that follows its server's own task, and follows that on
    /// here; false when it cannot be followed on (it is failed as any other).
    async fn adopt(&self, orphan: &StoredTask, follow_on: &FollowOn) -> Result<bool> {
        let id = orphan.id;
        let shared = Arc::new(Shared::adopted(orphan.upstream.clone()));
        let handle = TaskHandle {
            id,
            shared: shared.clone(),
            tasks: self.clone(),
        };
        let Some(work) = follow_on(orphan, handle.clone()) else {
            return Ok(false);
        };
        let me = self.inner.cluster.me();
        // Another live instance may sweep at the same time: one takes it.
        if !self
            .inner
            .store
            .tasks()
            .adopt(id, orphan.instance_id, me)
            .await?
        {
            return Ok(true);
        }
        tracing::info!(task = %id, from = %orphan.instance_id, "following on a task whose instance stopped");
        self.launch(Run::stored(id, shared), work);
        handle
            .say("the instance that followed this task stopped; another follows it on".into())
            .await;
        Ok(true)
    }

    /// Tells the user's streams of task `id` as its row now stands (after a write).
    async fn announce_row(&self, id: Uuid) {
        if let Ok(Some(task)) = self.inner.store.tasks().get(id).await {
            self.announce(&task);
        }
    }

    /// Tells the user's event streams, here and on the other instances.
    fn announce(&self, task: &StoredTask) {
        let data = task_json(task, self.poll_interval());
        self.inner
            .events
            .publish(&task.user_id, TASK_UPDATED, data.clone());
        self.inner.cluster.tell(Note::UserEvent {
            user: task.user_id.as_str().to_owned(),
            name: TASK_UPDATED.to_owned(),
            data,
        });
    }
}

/// A task as the REST API and the event stream show it.
pub fn task_json(task: &StoredTask, poll_interval: Duration) -> Value {
    let mut view = json!({
        "taskId": task.id,
        "status": task.status.as_str(),
        "server": task.server_name,
        "tool": task.tool_name,
        "origin": task.origin.as_str(),
        "createdAt": task.created_at.to_rfc3339(),
        "lastUpdatedAt": task.updated_at.to_rfc3339(),
        "ttlMs": task.ttl_ms(),
        "pollIntervalMs": poll_interval.as_millis() as u64,
    });
    let map = view.as_object_mut().expect("an object");
    if let Some(message) = &task.status_message {
        map.insert("statusMessage".into(), json!(message));
    }
    if let Some(result) = &task.result {
        map.insert("result".into(), result.clone());
    }
    if let Some(error) = &task.error {
        map.insert("error".into(), error.clone());
    }
    view
}
