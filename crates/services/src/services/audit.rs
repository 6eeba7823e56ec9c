//! The audit trail: one row per tool call on every path, and per admin decision, written
//! off the call's path without losing rows when the process dies.
//!
//! A row is appended as one JSON line to this instance's journal file
//! (`<storage.data_dir>/audit-journal/<instance>/open.ndjson`) before the call's answer goes
//! out: one `write(2)`, no fsync, so once it returns the row is in the kernel and survives
//! the process being killed (a power cut can lose the last lines the kernel had not yet
//! written back). Every `audit.flush_ms` the flusher renames the file aside, inserts its
//! rows in batches and deletes it once the database has them all; while the database is
//! down the files wait and are tried again. Each instance holds a lock on its own
//! directory; a directory whose lock can be taken belongs to an instance that died, and
//! the next flush of any instance adopts its files. Rows carry their id, so a file
//! inserted twice (a crash between the insert and the delete) still gives one row each.
//!
//! What a row keeps of a call's arguments and result (the redaction rule, also in the
//! README): the value of every object key whose name, without `-` and `_` and in any case,
//! contains `password`, `passwd`, `secret`, `token`, `apikey`, `authorization`,
//! `cookie`, `credential`, `privatekey` or `session` is replaced by `"[redacted]"`;
//! strings are cut to 256 characters; the whole text is cut to `audit.max_detail_bytes`.
//! A result keeps the text of its content (other blocks by their kind), cut alike.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::CallToolResult;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::config::AuditSettings;
use crate::domain::{CallOrigin, InstanceId, McpServer, ToolCallStatus, UserId};
use crate::error::Error;
use crate::store::{AuditEntry, AuditOutcome, Store, StoreError};

/// Rows per insert statement, largest first: a flush of any number of rows is a few
/// statements of these sizes, so the database prepares at most this many texts.
const BATCHES: [usize; 10] = [500, 256, 128, 64, 32, 16, 8, 4, 2, 1];
/// Rows in the open journal that wake the flusher before its time.
const BATCH: usize = BATCHES[0];
/// Rows kept in memory when the journal cannot take them (its disk full): past this the
/// oldest go, said in the log.
const MEMORY_CAP: usize = 100_000;
/// How long a reader waits for this instance's rows while the database refuses them.
const READER_WAIT: Duration = Duration::from_secs(2);
/// The longest pause between tries while the database refuses rows.
const RETRY_MAX: Duration = Duration::from_secs(10);
/// How often journals of instances that died are looked for.
const ADOPT_EVERY: Duration = Duration::from_secs(60);
/// How often rows past `audit.retention_days` are dropped.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Rows dropped per statement when pruning.
const PRUNE_BATCH: u64 = 10_000;

const OPEN: &str = "open.ndjson";
const LOCK: &str = "lock";
const FLUSHING: &str = "flushing";
const REJECTED: &str = "rejected.ndjson";

/// Why a flush left rows waiting.
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    #[error("the database did not take the rows: {0}")]
    Database(#[from] StoreError),
    #[error("the journal could not be read or moved: {0}")]
    Journal(#[from] std::io::Error),
}

/// Where calls' audit rows go; cheap to clone.
#[derive(Clone)]
pub struct AuditTrail {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    settings: AuditSettings,
    me: InstanceId,
    /// `None` when the journal directory could not be made: rows wait in memory only.
    journal: Option<Journal>,
    /// Rows the journal could not take.
    memory: Mutex<std::collections::VecDeque<AuditEntry>>,
    wake: tokio::sync::Notify,
    stop: CancellationToken,
    /// One flush at a time (the flusher's, or a reader's that wants its rows in).
    flushing: tokio::sync::Mutex<()>,
    /// The last flush failed: readers do not wait on the retries.
    failing: std::sync::atomic::AtomicBool,
}

struct Journal {
    root: PathBuf,
    dir: PathBuf,
    open: Mutex<OpenFile>,
    /// Set aside by `rotate`, oldest first, not yet in the database.
    aside: Mutex<std::collections::VecDeque<SetAside>>,
    seq: AtomicU64,
    /// Held for the life of the process: others see this directory is live.
    _lock: File,
}

struct OpenFile {
    file: File,
    lines: usize,
    /// The rows of the open file, so the flush inserts them without reading it back.
    rows: Vec<AuditEntry>,
}

/// A journal file set aside for the flush, with its rows when they are still in memory
/// (rows of a file adopted, read back at start or dropped from memory through a long
/// outage are read from the file).
struct SetAside {
    path: PathBuf,
    rows: Option<Vec<AuditEntry>>,
}

impl AuditTrail {
    /// Opens this instance's journal under `data_dir` and starts its flusher.
    pub fn start(store: Store, settings: AuditSettings, data_dir: &Path, me: InstanceId) -> Self {
        let journal = match Journal::open(&data_dir.join("audit-journal"), me) {
            Ok(journal) => Some(journal),
            Err(error) => {
                tracing::error!(%error, dir = %data_dir.display(), "the audit journal could not be opened; audit rows wait in memory until the database takes them");
                None
            }
        };
        let trail = Self {
            inner: Arc::new(Inner {
                store,
                settings,
                me,
                journal,
                memory: Mutex::new(std::collections::VecDeque::new()),
                failing: std::sync::atomic::AtomicBool::new(false),
                wake: tokio::sync::Notify::new(),
                stop: CancellationToken::new(),
                flushing: tokio::sync::Mutex::new(()),
            }),
        };
        tokio::spawn(trail.clone().flusher());
        trail
    }

    /// Stops the flusher and writes what is left (what the database refuses stays in the
    /// journal for the next start).
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        if let Err(error) = self.flush().await {
            tracing::warn!(%error, "audit rows left in the journal at shutdown; the next start writes them");
        }
    }

    /// Takes a row: in the journal when this returns (or in memory if its disk refused).
    pub fn record(&self, mut entry: AuditEntry) {
        if !self.inner.settings.enabled {
            return;
        }
        entry.instance_id.get_or_insert(self.inner.me.0);
        let pending = match &self.inner.journal {
            Some(journal) => match journal.append(entry) {
                Ok(lines) => lines,
                Err(failed) => {
                    let (error, entry) = *failed;
                    tracing::warn!(%error, "an audit row could not go to the journal; kept in memory");
                    self.keep_in_memory(entry)
                }
            },
            None => self.keep_in_memory(entry),
        };
        if pending >= BATCH {
            self.inner.wake.notify_one();
        }
    }

    fn keep_in_memory(&self, entry: AuditEntry) -> usize {
        let mut memory = self.inner.memory.lock().unwrap_or_else(|e| e.into_inner());
        if memory.len() >= MEMORY_CAP {
            tracing::error!(
                "the audit rows kept in memory reached {MEMORY_CAP}; the oldest is dropped"
            );
            memory.pop_front();
        }
        memory.push_back(entry);
        memory.len()
    }

    /// Writes every row taken so far; what the database refused waits for the next try.
    pub async fn flush(&self) -> Result<(), FlushError> {
        let _one = self.inner.flushing.lock().await;
        // Set aside first, whatever the database does: through an outage the journal is
        // a series of small files (one per flush), never one file read whole at the end.
        if let Some(journal) = &self.inner.journal {
            journal.rotate()?;
        }
        let memory =
            std::mem::take(&mut *self.inner.memory.lock().unwrap_or_else(|e| e.into_inner()));
        if !memory.is_empty()
            && let Err(error) = self.insert(memory.iter().cloned().collect()).await
        {
            let mut kept = self.inner.memory.lock().unwrap_or_else(|e| e.into_inner());
            let newer = std::mem::replace(&mut *kept, memory);
            kept.extend(newer);
            // Oldest first out, as when the rows came.
            let over = kept.len().saturating_sub(MEMORY_CAP);
            kept.drain(..over);
            return Err(error.into());
        }
        let Some(journal) = &self.inner.journal else {
            return Ok(());
        };
        // What this process set aside, its rows in memory: no file read back.
        loop {
            let next = {
                let mut aside = journal.aside.lock().unwrap_or_else(|e| e.into_inner());
                match aside.front_mut() {
                    Some(front) => Some((front.path.clone(), front.rows.take())),
                    None => None,
                }
            };
            let Some((path, rows)) = next else { break };
            let rows = match rows {
                Some(rows) => rows,
                None => read_rows(&path)?,
            };
            // On failure the rows are read back from the file next time.
            self.insert(rows).await?;
            journal
                .aside
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            remove_flushed(&path);
        }
        // Adopted files, and this directory's from before a restart.
        for path in journal.others_waiting()? {
            let rows = read_rows(&path)?;
            self.insert(rows).await?;
            remove_flushed(&path);
        }
        Ok(())
    }

    /// Inserts `rows` in batches. A batch the database refuses for anything but an outage
    /// is tried row by row, and a row refused alone is set aside (`rejected.ndjson`
    /// beside the journal, and the log): one bad row never holds up the others.
    async fn insert(&self, rows: Vec<AuditEntry>) -> Result<(), StoreError> {
        let audit = self.inner.store.audit();
        let mut rest = &rows[..];
        while !rest.is_empty() {
            let size = BATCHES
                .into_iter()
                .find(|size| *size <= rest.len())
                .unwrap_or(1);
            let (batch, after) = rest.split_at(size);
            rest = after;
            match audit.record_many(batch).await {
                Ok(()) => {}
                Err(error @ StoreError::Unavailable(_)) => return Err(error),
                Err(_) => {
                    for row in batch {
                        match audit.record_many(std::slice::from_ref(row)).await {
                            Ok(()) => {}
                            Err(error @ StoreError::Unavailable(_)) => return Err(error),
                            Err(error) => self.reject(row, &error),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn reject(&self, row: &AuditEntry, error: &StoreError) {
        tracing::error!(%error, id = %row.id, tool = %row.tool_name, "the database refused an audit row; it is kept in rejected.ndjson");
        if let Some(journal) = &self.inner.journal {
            let kept = serde_json::to_vec(row).map(|mut line| {
                line.push(b'\n');
                line
            });
            if let Ok(line) = kept {
                let _ = append_to(&journal.dir.join(REJECTED)).and_then(|mut f| f.write_all(&line));
            }
        }
    }

    async fn flusher(self) {
        let stop = self.inner.stop.clone();
        let every = Duration::from_millis(self.inner.settings.flush_ms.max(10));
        let mut adopted_at = tokio::time::Instant::now() - ADOPT_EVERY;
        let mut pruned_at = tokio::time::Instant::now();
        // Through an outage the tries slow down, up to one every RETRY_MAX.
        let mut pause = every;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.inner.wake.notified() => {}
                _ = stop.cancelled() => break,
            }
            if adopted_at.elapsed() >= ADOPT_EVERY {
                adopted_at = tokio::time::Instant::now();
                if let Some(journal) = &self.inner.journal {
                    journal.adopt_orphans();
                }
            }
            let was_failing = self.inner.failing.load(Ordering::Relaxed);
            match self.flush().await {
                Ok(()) => {
                    pause = every;
                    if was_failing {
                        self.inner.failing.store(false, Ordering::Relaxed);
                        tracing::info!("audit rows reach the database again");
                    }
                }
                Err(error) => {
                    pause = (pause * 2).min(RETRY_MAX);
                    if !was_failing {
                        self.inner.failing.store(true, Ordering::Relaxed);
                        tracing::warn!(%error, "audit rows wait in the journal for the database");
                    }
                }
            }
            if pruned_at.elapsed() >= PRUNE_EVERY {
                pruned_at = tokio::time::Instant::now();
                // Its own task: a first prune of many rows never holds up the flushes.
                let trail = self.clone();
                tokio::spawn(async move { trail.prune().await });
            }
        }
    }

    /// Flushes before a read, so a reader sees every call this instance answered. While
    /// the database has been refusing rows the reader waits at most [`READER_WAIT`] for
    /// the try (the database may be back before the flusher's next, slowed-down try).
    pub async fn flush_for_reader(&self) {
        let tried = if self.inner.failing.load(Ordering::Relaxed) {
            tokio::time::timeout(READER_WAIT, self.flush()).await
        } else {
            Ok(self.flush().await)
        };
        match tried {
            Ok(Ok(())) => {
                if self.inner.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("audit rows reach the database again");
                    // The flusher's slowed-down pause ends with its next, quick, try.
                    self.inner.wake.notify_one();
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "the audit log is read without this instance's newest rows");
            }
            Err(_) => tracing::warn!(
                "the audit log is read without this instance's newest rows: the database is slow to take them"
            ),
        }
    }

    /// Drops rows older than `audit.retention_days` (0 keeps them all).
    pub async fn prune(&self) {
        let days = self.inner.settings.retention_days;
        if days == 0 {
            return;
        }
        let Some(cutoff) = chrono::Duration::try_days(days.min(36_500) as i64)
            .and_then(|age| crate::domain::now().checked_sub_signed(age))
        else {
            return;
        };
        loop {
            match self
                .inner
                .store
                .audit()
                .delete_before(cutoff, PRUNE_BATCH)
                .await
            {
                Ok(gone) if gone == PRUNE_BATCH => continue,
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(%error, "old audit rows could not be dropped");
                    return;
                }
            }
        }
    }
}

/// One call's row in the making: written when the call ends, or as `cancelled` when the
/// call is dropped before it ends (its caller went away or cancelled it).
pub struct CallAudit {
    trail: AuditTrail,
    entry: Option<AuditEntry>,
    started: std::time::Instant,
    /// Paths in the result a policy's `redact` rules keep out of the row.
    result_fields: Vec<String>,
}

impl AuditTrail {
    pub fn begin_call(
        &self,
        user: &UserId,
        server_id: &str,
        tool: &str,
        origin: CallOrigin,
        arguments: &Value,
    ) -> CallAudit {
        let settings = &self.inner.settings;
        if !settings.enabled {
            return CallAudit {
                trail: self.clone(),
                entry: None,
                started: std::time::Instant::now(),
                result_fields: Vec::new(),
            };
        }
        let mut entry = AuditEntry::new(
            user,
            AuditOutcome::Settled(ToolCallStatus::Cancelled),
            "",
            tool,
        );
        entry.server_id = uuid::Uuid::parse_str(server_id).ok();
        stamp_origin(&mut entry, origin);
        entry.arguments = settings
            .record_details
            .then(|| arguments_detail(arguments, settings.max_detail_bytes));
        CallAudit {
            trail: self.clone(),
            entry: Some(entry),
            started: std::time::Instant::now(),
            result_fields: Vec::new(),
        }
    }

    /// A connection tried on request that failed (`connect_failed`): who tried, and why.
    pub fn connect_failed(
        &self,
        user: &UserId,
        server_id: &str,
        server_name: &str,
        origin: CallOrigin,
        error: &Error,
    ) {
        let mut entry = AuditEntry::new(user, AuditOutcome::ConnectFailed, server_name, "");
        entry.server_id = uuid::Uuid::parse_str(server_id).ok();
        stamp_origin(&mut entry, origin);
        self.stamp_error(&mut entry, error);
        self.record(entry);
    }

    /// Why a row's call or connect failed: the stable code, and the words, cut.
    fn stamp_error(&self, entry: &mut AuditEntry, error: &Error) {
        entry.error_code = Some(error.code().to_owned());
        entry.error_message = Some(cut_bytes(
            error.to_string(),
            self.inner.settings.max_detail_bytes,
        ));
    }
}

/// Who asked, as a row says it.
fn stamp_origin(entry: &mut AuditEntry, origin: CallOrigin) {
    entry.message_id = origin.message;
    entry.via = Some(origin.via.as_str().to_owned());
    entry.key_id = origin.key_id.map(|key| key.to_string());
    entry.by_admin = origin.by_admin;
    entry.from_app = origin.from_app;
}

impl CallAudit {
    /// The server the call went to, once known.
    pub fn on_server(&mut self, server: &McpServer) {
        if let Some(entry) = &mut self.entry {
            entry.server_id = Some(server.id);
            entry.server_name = server.spec.name.as_str().to_owned();
        }
    }

    /// Keeps `fields` (what a policy's `redact` rules name: `arguments.<path>`,
    /// `result.<path>`) out of the row: the arguments' now, the result's when it comes.
    pub fn redact(&mut self, fields: &[String], arguments: &Value) {
        let settings = &self.trail.inner.settings;
        let Some(entry) = &mut self.entry else {
            return;
        };
        if settings.record_details {
            let mut kept = arguments.clone();
            for path in fields.iter().filter_map(|f| f.strip_prefix("arguments.")) {
                redact_path(&mut kept, path);
            }
            entry.arguments = Some(arguments_detail(&kept, settings.max_detail_bytes));
        }
        self.result_fields = fields
            .iter()
            .filter_map(|f| f.strip_prefix("result."))
            .map(str::to_owned)
            .collect();
    }

    /// The server answered (an error result included).
    pub fn answered(mut self, result: &CallToolResult) {
        let settings = &self.trail.inner.settings;
        let redacted;
        let result = if self.result_fields.is_empty() {
            result
        } else {
            redacted = redact_result(result, &self.result_fields);
            &redacted
        };
        if let Some(mut entry) = self.entry.take() {
            let status = if result.is_error == Some(true) {
                ToolCallStatus::Error
            } else {
                ToolCallStatus::Done
            };
            entry.outcome = status.as_str().to_owned();
            entry.result = settings
                .record_details
                .then(|| result_detail(result, settings.max_detail_bytes));
            self.write(entry);
        }
    }

    /// The call did not reach an answer: why, by code and in words.
    pub fn failed(mut self, error: &Error) {
        if let Some(mut entry) = self.entry.take() {
            entry.outcome = ToolCallStatus::Error.as_str().to_owned();
            self.trail.stamp_error(&mut entry, error);
            self.write(entry);
        }
    }

    fn write(&self, mut entry: AuditEntry) {
        entry.latency_ms = Some(self.started.elapsed().as_millis() as i64);
        self.trail.record(entry);
    }
}

impl Drop for CallAudit {
    fn drop(&mut self) {
        if let Some(mut entry) = self.entry.take() {
            entry.error_message = Some("the call was cancelled before it ended".into());
            self.write(entry);
        }
    }
}

impl Journal {
    fn open(root: &Path, me: InstanceId) -> std::io::Result<Self> {
        // Made and locked under a name others skip, then given its own: another instance
        // looking for orphans never finds it unlocked.
        let starting = root.join(format!(".{me}.starting"));
        std::fs::create_dir_all(&starting)?;
        let lock = lock_file(&starting)?;
        lock.try_lock().map_err(std::io::Error::other)?;
        let dir = root.join(me.to_string());
        std::fs::rename(&starting, &dir)?;
        let journal = Self {
            root: root.to_owned(),
            open: Mutex::new(OpenFile {
                file: append_to(&dir.join(OPEN))?,
                lines: 0,
                rows: Vec::new(),
            }),
            aside: Mutex::new(std::collections::VecDeque::new()),
            dir,
            seq: AtomicU64::new(0),
            _lock: lock,
        };
        journal.adopt_orphans();
        Ok(journal)
    }

    /// Appends one line (the row kept for the flush too); how many lines the open file
    /// holds now. On failure the row is handed back.
    fn append(&self, entry: AuditEntry) -> Result<usize, Box<(std::io::Error, AuditEntry)>> {
        let mut line = match serde_json::to_vec(&entry) {
            Ok(line) => line,
            Err(error) => return Err(Box::new((std::io::Error::other(error), entry))),
        };
        line.push(b'\n');
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        // One write of the whole line: a crash leaves it whole or (rarely) torn, never mixed.
        if let Err(error) = open.file.write_all(&line) {
            // A short write (a full disk) must not glue the next line onto this one.
            let _ = open.file.write_all(b"\n");
            return Err(Box::new((error, entry)));
        }
        open.lines += 1;
        open.rows.push(entry);
        Ok(open.lines)
    }

    /// Sets the open file's rows aside for the flush and starts a new one.
    fn rotate(&self) -> std::io::Result<()> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.lines == 0 {
            return Ok(());
        }
        let aside = self.next_flushing();
        std::fs::rename(self.dir.join(OPEN), &aside)?;
        match append_to(&self.dir.join(OPEN)) {
            Ok(file) => {
                open.file = file;
                open.lines = 0;
                let rows = std::mem::take(&mut open.rows);
                drop(open);
                let mut set_aside = self.aside.lock().unwrap_or_else(|e| e.into_inner());
                set_aside.push_back(SetAside {
                    path: aside,
                    rows: Some(rows),
                });
                // Through a long outage only the newest rows stay in memory as well.
                let mut held: usize = set_aside
                    .iter()
                    .filter_map(|a| a.rows.as_ref())
                    .map(Vec::len)
                    .sum();
                for older in set_aside.iter_mut() {
                    if held <= MEMORY_CAP {
                        break;
                    }
                    if let Some(rows) = older.rows.take() {
                        held -= rows.len();
                    }
                }
                Ok(())
            }
            Err(error) => {
                // Appends go on into the file as it was: give it its name back, so it is
                // not flushed (and deleted) under them.
                let _ = std::fs::rename(&aside, self.dir.join(OPEN));
                Err(error)
            }
        }
    }

    fn next_flushing(&self) -> PathBuf {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        // Time first, so files adopted from others sort with this instance's own.
        let now = crate::domain::now().timestamp_micros();
        self.dir.join(format!("{now:020}-{seq:06}.{FLUSHING}"))
    }

    /// Files waiting for the database that `rotate` did not set aside (adopted ones, or
    /// this directory's at start), oldest first.
    fn others_waiting(&self) -> std::io::Result<Vec<PathBuf>> {
        let known: std::collections::HashSet<PathBuf> = self
            .aside
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|a| a.path.clone())
            .collect();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == FLUSHING))
            .filter(|path| !known.contains(path))
            .collect();
        files.sort();
        Ok(files)
    }

    /// Moves the files of instances that died (their lock free) into this directory.
    fn adopt_orphans(&self) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        for dir in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            let hidden = dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with('.'));
            if dir == self.dir || hidden || !dir.is_dir() {
                continue;
            }
            let Ok(lock) = lock_file(&dir) else {
                continue;
            };
            if lock.try_lock().is_err() {
                continue; // a live instance's
            }
            let Ok(files) = std::fs::read_dir(&dir) else {
                continue;
            };
            let (mut moved, mut left) = (0, 0);
            for file in files.filter_map(|e| e.ok().map(|e| e.path())) {
                let name = file
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                if name == LOCK {
                    continue;
                }
                if name == REJECTED {
                    // Rows the database refused stay where an operator can find them.
                    left += 1;
                    continue;
                }
                match std::fs::rename(&file, self.next_flushing()) {
                    Ok(()) => moved += 1,
                    Err(error) => {
                        left += 1;
                        tracing::warn!(%error, path = %file.display(), "an orphaned audit journal could not be adopted");
                    }
                }
            }
            drop(lock);
            // Only an emptied directory goes: what could not be moved is tried again.
            if left == 0 {
                let _ = std::fs::remove_file(dir.join(LOCK));
                let _ = std::fs::remove_dir(&dir);
            }
            if moved > 0 {
                tracing::info!(files = moved, from = %dir.display(), "adopted the audit journal of an instance that stopped");
            }
        }
    }
}

fn remove_flushed(path: &Path) {
    if let Err(error) = std::fs::remove_file(path) {
        tracing::warn!(%error, path = %path.display(), "a flushed audit journal could not be removed");
    }
}

fn lock_file(dir: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK))
}

fn append_to(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The rows of a journal file; a line that does not parse (torn by a crash) is skipped.
fn read_rows(path: &Path) -> std::io::Result<Vec<AuditEntry>> {
    let reader = std::io::BufReader::new(File::open(path)?);
    let mut rows = Vec::new();
    for line in reader.split(b'\n') {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice(&line) {
            Ok(row) => rows.push(row),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "a torn audit journal line was skipped");
            }
        }
    }
    Ok(rows)
}

/// Key names whose values a row never keeps (compared without `-`/`_`, in lower case).
const SECRET_KEYS: [&str; 10] = [
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "authorization",
    "cookie",
    "credential",
    "privatekey",
    "session",
];
const MAX_STRING_CHARS: usize = 256;
const REDACTED: &str = "[redacted]";

fn is_secret_key(key: &str) -> bool {
    // Every call's argument names pass here: the usual lower-case ASCII name is compared
    // as it is; only others are folded into a copy first.
    if key
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return SECRET_KEYS.iter().any(|secret| key.contains(secret));
    }
    let key: String = key
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_KEYS.iter().any(|secret| key.contains(secret))
}

/// `value` with secrets replaced and long strings cut (the rule in the module's docs).
pub fn redacted(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let kept = if is_secret_key(key) {
                        Value::String(REDACTED.into())
                    } else {
                        redacted(value)
                    };
                    (key.clone(), kept)
                })
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redacted).collect()),
        Value::String(text) => Value::String(cut_chars(text, MAX_STRING_CHARS)),
        other => other.clone(),
    }
}

/// Replaces what `path` (parts joined by `.`) names in `value` by `"[redacted]"`; an
/// array on the way applies the rest of the path to each of its items.
pub fn redact_path(value: &mut Value, path: &str) {
    let (head, rest) = match path.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (path, None),
    };
    match value {
        Value::Array(items) => {
            for item in items {
                redact_path(item, path);
            }
        }
        Value::Object(map) => match (map.get_mut(head), rest) {
            (Some(slot), None) => *slot = Value::String(REDACTED.into()),
            (Some(slot), Some(rest)) => redact_path(slot, rest),
            (None, _) => {}
        },
        _ => {}
    }
}

/// `result` with `paths` redacted in its structured content and in each text block that
/// is JSON (where tools put what they return as text).
fn redact_result(result: &CallToolResult, paths: &[String]) -> CallToolResult {
    let mut result = result.clone();
    if let Some(structured) = &mut result.structured_content {
        for path in paths {
            redact_path(structured, path);
        }
    }
    for block in &mut result.content {
        let Some(text) = block.as_text() else {
            continue;
        };
        let Ok(mut parsed) = serde_json::from_str::<Value>(&text.text) else {
            continue;
        };
        for path in paths {
            redact_path(&mut parsed, path);
        }
        *block = rmcp::model::ContentBlock::text(parsed.to_string());
    }
    result
}

fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…[{} chars]", &text[..end], text.chars().count()),
    }
}

/// `text` cut to `max` bytes (at a character boundary), saying how long it was.
pub fn cut_bytes(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[cut: {} bytes]", &text[..end], text.len())
}

/// What a row keeps of a call's arguments.
pub fn arguments_detail(arguments: &Value, max_bytes: usize) -> String {
    cut_bytes(redacted(arguments).to_string(), max_bytes)
}

/// What a row keeps of a call's result: the text of its content, other blocks by kind.
pub fn result_detail(result: &CallToolResult, max_bytes: usize) -> String {
    let mut text = String::new();
    for block in &result.content {
        if !text.is_empty() {
            text.push('\n');
        }
        match block.as_text() {
            Some(block) => text.push_str(&block.text),
            None => {
                let kind = serde_json::to_value(block)
                    .ok()
                    .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| "content".into());
                text.push_str(&format!("[{kind}]"));
            }
        }
    }
    if text.is_empty()
        && let Some(structured) = &result.structured_content
    {
        text = redacted(structured).to_string();
    }
    cut_bytes(text, max_bytes)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_are_redacted_by_key_and_long_strings_cut() {
        let kept = redacted(&json!({
            "query": "x".repeat(300),
            "API_KEY": "k",
            "nested": [{"client-secret": "s", "Session_Id": "i", "count": 3}],
            "accessToken": "t",
        }));
        assert_eq!(kept["API_KEY"], REDACTED);
        assert_eq!(kept["accessToken"], REDACTED);
        assert_eq!(kept["nested"][0]["client-secret"], REDACTED);
        assert_eq!(kept["nested"][0]["Session_Id"], REDACTED);
        assert_eq!(kept["nested"][0]["count"], 3);
        let query = kept["query"].as_str().unwrap();
        assert!(query.ends_with("…[300 chars]"), "{query}");
        assert_eq!(query.chars().filter(|c| *c == 'x').count(), 256);
    }

    #[test]
    fn a_detail_is_cut_at_a_character_boundary() {
        let cut = cut_bytes("é".repeat(10), 5);
        assert!(cut.starts_with("éé…"), "{cut}");
        assert!(cut.ends_with("[cut: 20 bytes]"), "{cut}");
    }
}
