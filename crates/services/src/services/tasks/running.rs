//! A task's call while it runs on this instance: its state in memory (status message,
//! what it waits for), written to the row as it changes once the row exists, and the
//! runner that hands the call's end to the starter or the row.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{TaskEnd, TaskWork, Tasks};
use crate::domain::TaskStatus;
use crate::store::UpstreamTask;

/// Status messages are written at most this often (progress may come much faster).
const MESSAGE_EVERY: Duration = Duration::from_secs(1);

/// What a running task's call and its readers share.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) cancel: CancellationToken,
    /// Notified when the call should become a task at once (the server made one of it).
    pub(super) promoted: tokio::sync::Notify,
    pub(super) state: Mutex<State>,
    /// Held while the row is written, so the last write carries the latest state.
    pub(super) writing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
pub(super) struct State {
    /// The row exists: changes are written to it.
    pub(super) stored: bool,
    message: Option<String>,
    last_message_write: Option<tokio::time::Instant>,
    /// What the call waits for, by key, and where each answer goes.
    asked: BTreeMap<String, (Value, oneshot::Sender<Value>)>,
    next_key: u64,
    /// The server's own task the call follows, once the server made one.
    upstream: Option<UpstreamTask>,
}

/// An open task's state as its row keeps it.
pub(super) struct Snapshot {
    pub(super) status: TaskStatus,
    pub(super) status_message: Option<String>,
    pub(super) input_requests: Option<Value>,
    pub(super) upstream: Option<UpstreamTask>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            status: TaskStatus::Working,
            status_message: None,
            input_requests: None,
            upstream: None,
        }
    }
}

impl Shared {
    /// A task taken over from a stopped instance: its row exists, and it follows
    /// `upstream`.
    pub(super) fn adopted(upstream: Option<UpstreamTask>) -> Self {
        let shared = Shared::default();
        {
            let mut state = shared.state.lock().expect("task state");
            state.stored = true;
            state.upstream = upstream;
        }
        shared
    }
}

impl State {
    pub(super) fn snapshot(&self) -> Snapshot {
        if self.asked.is_empty() {
            return Snapshot {
                status: TaskStatus::Working,
                status_message: self.message.clone(),
                input_requests: None,
                upstream: self.upstream.clone(),
            };
        }
        let requests = self
            .asked
            .iter()
            .map(|(key, (request, _))| (key.clone(), request.clone()))
            .collect();
        Snapshot {
            status: TaskStatus::InputRequired,
            status_message: self.message.clone(),
            input_requests: Some(Value::Object(requests)),
            upstream: self.upstream.clone(),
        }
    }
}

/// What a task's call holds of its task.
#[derive(Clone)]
pub struct TaskHandle {
    pub(super) id: Uuid,
    pub(super) shared: Arc<Shared>,
    pub(super) tasks: Tasks,
}

impl TaskHandle {
    /// Cancelled when the task is (its call should stop).
    pub fn cancelled(&self) -> CancellationToken {
        self.shared.cancel.clone()
    }

    /// The call's latest word on what it is doing, as the task's status message.
    pub async fn say(&self, message: String) {
        let write = {
            let mut state = self.shared.state.lock().expect("task state");
            state.message = Some(message);
            let due = state
                .last_message_write
                .is_none_or(|at| at.elapsed() >= MESSAGE_EVERY);
            if state.stored && due {
                state.last_message_write = Some(tokio::time::Instant::now());
            }
            state.stored && due
        };
        if write {
            self.tasks.write_progress(self.id, &self.shared).await;
        }
    }

    /// Runs `call`; the message of each progress notification it reports on `progress`
    /// becomes the task's status message.
    pub async fn saying<T>(
        &self,
        call: impl std::future::Future<Output = T>,
        mut progress: tokio::sync::mpsc::UnboundedReceiver<crate::mcp::Progress>,
    ) -> T {
        tokio::pin!(call);
        loop {
            tokio::select! {
                biased;
                Some(update) = progress.recv() => {
                    if let Some(message) = update.message {
                        self.say(message).await;
                    }
                }
                result = &mut call => return result,
            }
        }
    }

    /// The server behind made a task of the call: the task follows it (recorded on the
    /// row, so another instance follows it on if this one stops), and a call still waited
    /// for inline becomes a task at once, as the server decided.
    pub fn follows(&self, upstream: UpstreamTask) {
        let stored = {
            let mut state = self.shared.state.lock().expect("task state");
            state.upstream = Some(upstream.clone());
            state.stored
        };
        self.shared.promoted.notify_one();
        if stored {
            let (tasks, id, shared) = (self.tasks.clone(), self.id, self.shared.clone());
            tokio::spawn(async move {
                // After the row's first write, which may still be under way: an update
                // before it would find no row and the server's task would be forgotten.
                let _writing = shared.writing.lock().await;
                if let Err(error) = tasks.inner.store.tasks().follows(id, &upstream).await {
                    tracing::warn!(task = %id, %error, "the server's own task was not recorded");
                }
            });
        }
    }

    /// Lists `request` among what the task waits for while the returned guard lives (the
    /// task is `input_required` meanwhile), for a wait the client cannot end by answering
    /// (a user's approval). The guard tells the client's answer, if one comes.
    pub async fn waiting_on(&self, request: Value) -> Waiting {
        let (reply, answered) = oneshot::channel();
        let key = {
            let mut state = self.shared.state.lock().expect("task state");
            state.next_key += 1;
            let key = format!("input-{}", state.next_key);
            state.asked.insert(key.clone(), (request, reply));
            key
        };
        self.tasks.write_progress(self.id, &self.shared).await;
        Waiting {
            task: self.clone(),
            key,
            answered,
        }
    }

    /// Puts `request` (an input request: `{method, params}`) to the client and waits for
    /// its answer (`tasks/update`); the task is `input_required` meanwhile. `None` when the
    /// task ended first.
    pub async fn ask(&self, request: Value) -> Option<Value> {
        let mut waiting = self.waiting_on(request).await;
        tokio::select! {
            answer = waiting.reply() => answer,
            () = self.shared.cancel.cancelled() => None,
        }
    }
}

/// A wait listed among a task's input requests (`TaskHandle::waiting_on`); dropped, it is
/// withdrawn from the task (written at once, in a task of its own).
pub struct Waiting {
    task: TaskHandle,
    key: String,
    answered: oneshot::Receiver<Value>,
}

impl Waiting {
    /// The client's answer to the listed question (pending forever if none comes).
    pub async fn answered(&mut self) -> Value {
        match self.reply().await {
            Some(answer) => answer,
            None => std::future::pending().await,
        }
    }

    /// The client's answer; `None` when the question went without one.
    async fn reply(&mut self) -> Option<Value> {
        (&mut self.answered).await.ok()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let task = self.task.clone();
        let removed = task
            .shared
            .state
            .lock()
            .expect("task state")
            .asked
            .remove(&self.key)
            .is_some();
        if removed {
            tokio::spawn(async move { task.tasks.write_progress(task.id, &task.shared).await });
        }
    }
}

/// What the runner of one task's call holds.
pub(super) struct Run {
    pub(super) id: Uuid,
    pub(super) shared: Arc<Shared>,
    /// The call's end, to a starter still waiting inline.
    pub(super) ended: oneshot::Sender<TaskEnd>,
    /// Whether the starter stored the task.
    pub(super) stored: oneshot::Receiver<bool>,
}

impl Run {
    /// The run of a task whose row exists: nobody waits inline, its end goes to the row.
    pub(super) fn stored(id: Uuid, shared: Arc<Shared>) -> Self {
        let (ended, _) = oneshot::channel();
        let (stored_tx, stored) = oneshot::channel();
        let _ = stored_tx.send(true);
        Self {
            id,
            shared,
            ended,
            stored,
        }
    }
}

impl Tasks {
    /// Writes what an open task is doing, if its row exists yet.
    pub(super) async fn write_progress(&self, id: Uuid, shared: &Shared) {
        let _writing = shared.writing.lock().await;
        let snapshot = {
            let state = shared.state.lock().expect("task state");
            if !state.stored {
                return;
            }
            state.snapshot()
        };
        let written = self
            .inner
            .store
            .tasks()
            .progress(
                id,
                snapshot.status,
                snapshot.status_message,
                snapshot.input_requests,
            )
            .await;
        match written {
            Ok(true) => self.announce_row(id).await,
            Ok(false) => {}
            Err(error) => tracing::warn!(task = %id, %error, "a task's progress was not stored"),
        }
    }

    /// Hands answers to the questions of a task this instance runs.
    pub(crate) async fn answer_here(&self, id: Uuid, responses: serde_json::Map<String, Value>) {
        let Some(shared) = self.running(id) else {
            return;
        };
        let answered: Vec<_> = {
            let mut state = shared.state.lock().expect("task state");
            responses
                .into_iter()
                .filter_map(|(key, answer)| {
                    state.asked.remove(&key).map(|(_, reply)| (reply, answer))
                })
                .collect()
        };
        if answered.is_empty() {
            return;
        }
        // The row first: a `tasks/get` after the acknowledgement no longer lists them.
        self.write_progress(id, &shared).await;
        for (reply, answer) in answered {
            let _ = reply.send(answer);
        }
    }

    fn running(&self, id: Uuid) -> Option<Arc<Shared>> {
        self.inner
            .running
            .lock()
            .expect("running tasks")
            .get(&id)
            .cloned()
    }

    pub(super) fn forget(&self, id: Uuid) -> Option<Arc<Shared>> {
        self.inner
            .running
            .lock()
            .expect("running tasks")
            .remove(&id)
    }

    /// Registers a task's call as running here (its cancels and answers find it) and runs
    /// it.
    pub(super) fn launch(&self, run: Run, call: TaskWork) {
        self.inner
            .running
            .lock()
            .expect("running tasks")
            .insert(run.id, run.shared.clone());
        tokio::spawn(self.clone().run(run, call));
    }

    /// The call of a task, to its end: answered inline when the starter still waits,
    /// else settled on the row once the row exists.
    async fn run(self, run: Run, call: TaskWork) {
        let Run {
            id,
            shared,
            ended,
            stored,
        } = run;
        let end = tokio::select! {
            biased;
            () = shared.cancel.cancelled() => None,
            end = call => Some(end),
        };
        // Cancelled: whoever cancelled settled the row; dropping the call tells the server.
        let Some(end) = end else {
            self.forget(id);
            return;
        };
        if let Err(end) = ended.send(end)
            && stored.await.unwrap_or(false)
        {
            self.settle(id, end).await;
        }
        self.forget(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_waiting_for_answers_is_input_required_until_the_last_comes() {
        let mut state = State::default();
        assert_eq!(state.snapshot().status, TaskStatus::Working);
        let (one, _a) = oneshot::channel();
        let (two, _b) = oneshot::channel();
        state.asked.insert(
            "input-1".into(),
            (serde_json::json!({"method": "elicitation/create"}), one),
        );
        state.asked.insert(
            "input-2".into(),
            (serde_json::json!({"method": "sampling/createMessage"}), two),
        );
        let snapshot = state.snapshot();
        assert_eq!(snapshot.status, TaskStatus::InputRequired);
        assert_eq!(
            snapshot.input_requests.unwrap().as_object().unwrap().len(),
            2
        );
        state.asked.remove("input-1");
        assert_eq!(state.asked.len(), 1);
        assert_eq!(state.snapshot().status, TaskStatus::InputRequired);
        state.asked.remove("input-2");
        assert_eq!(state.snapshot().status, TaskStatus::Working);
        assert!(state.snapshot().input_requests.is_none());
    }
}
