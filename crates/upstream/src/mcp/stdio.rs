//! The stdio transport: a local server started as its own process group, speaking
//! newline-delimited JSON-RPC on its stdin and stdout.
//!
//! rmcp's `TokioChildProcess` is not used because of what it does with the process and
//! with long lines:
//! - every stop must end the whole group (npx and uvx servers are a shell or launcher
//!   with the real server beneath it), and every process that left it (a browser in a
//!   session of its own, found by parentage: [`tree`], and every process in the
//!   server's own cgroup where the service may make one: [`cgroup`]), TERM first and
//!   KILL after a grace, and nothing may outlive the service even when it is killed
//!   with SIGKILL: a small watchdog process (the [`GroupGuard`]) holds the list of live
//!   groups and kills them, and empties the servers' cgroups, when the service's end of
//!   its pipe closes;
//! - a server's cgroup carries its memory and process limits, and when its output ends
//!   the transport says why (its exit status, a limit it went over) for the error its
//!   callers and the connection's state show;
//! - a message over the size limit must fail the request it answers at once (rmcp drops
//!   the line and the call hangs until its timeout), and a large message must not leave
//!   its buffer behind (rmcp keeps the read buffer at its largest size for the life of
//!   the connection: 16 MiB per connection after one big result).

use std::collections::{BTreeMap, HashSet};
use std::io::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use regex::bytes::Regex;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolResult, ClientNotification, ClientRequest, JsonRpcMessage, JsonRpcResponse, RequestId,
    ServerNotification, ServerRequest, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

/// The JSON-RPC error code the transport answers an oversized message with; the client
/// turns it into [`super::McpError::ResultTooLarge`].
pub(crate) const MESSAGE_TOO_LARGE_CODE: i32 = -32_099;

/// How long a stopping group gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// Read buffers above this size are given back after the message that needed them.
const KEPT_BUFFER: usize = 64 * 1024;

/// How much of an oversized line's head and tail is kept to find its request id.
const ID_WINDOW: usize = 1024;

/// What to start, the limit on one incoming message, and what the server may use.
pub(crate) struct StdioCommand {
    pub command: tokio::process::Command,
    pub max_message_bytes: usize,
    pub limits: StdioLimits,
    /// The sandbox's egress proxy, kept as long as the server runs.
    pub egress: Option<crate::sandbox::EgressProxy>,
    /// Whether it starts in a sandbox (whose own processes its count leaves out).
    pub sandboxed: bool,
}

pub struct StdioTransport {
    group: ChildGroup,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    reader: LineReader<ChildStdout>,
    calls: PendingCalls,
    cgroup: Option<Arc<ServerCgroup>>,
    exit: ExitNote,
    _egress: Option<crate::sandbox::EgressProxy>,
    /// Its leader is bubblewrap, which exits 128 + N when the server is killed by N.
    sandboxed: bool,
}

/// Why a stdio server's output ended, set once it has: read by the client, whose
/// requests only hear that the transport closed.
pub type ExitNote = Arc<OnceLock<String>>;

/// How long a server whose output ended gets to exit before its status is left unsaid.
const EXIT_WAIT: Duration = Duration::from_millis(200);

/// Ids of the `tools/call` requests sent and not answered yet, so that their answers are
/// read as tool results at once. rmcp's `ServerResult` is an untagged union that lists
/// `CallToolResult` 16th: read through it, each call's answer first failed 15 other
/// shapes, a serde error formatted for each (~29,000 instructions, a sixth of a REST
/// call's).
#[derive(Clone, Default)]
struct PendingCalls(Arc<Mutex<HashSet<RequestId>>>);

/// More unanswered calls than this on one connection means answers went missing (a
/// server that never answers what was cancelled): the ids are dropped, and the answers
/// that still come are read the general way, as any other answer.
const MAX_PENDING_CALLS: usize = 65_536;

impl PendingCalls {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes a call going out, or one the client gave up on.
    fn outgoing(&self, message: &TxJsonRpcMessage<RoleClient>) {
        match message {
            JsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::CallToolRequest(_)) =>
            {
                let mut set = self.set();
                if set.len() >= MAX_PENDING_CALLS {
                    set.clear();
                }
                set.insert(request.id.clone());
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.set().remove(id);
                }
            }
            _ => {}
        }
    }

    fn answered(&self, id: &RequestId) -> bool {
        self.set().remove(id)
    }
}

impl StdioTransport {
    /// Starts the command as the leader of a new process group, registered with the guard
    /// before it can have children of its own.
    pub fn spawn(spec: StdioCommand) -> std::io::Result<(Self, Option<ChildStderr>)> {
        let StdioCommand {
            mut command,
            max_message_bytes,
            limits,
            egress,
            sandboxed,
        } = spec;
        let sandbox = sandboxed.then_some(tree::SandboxShape {
            egress: egress.is_some(),
        });
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        let guard = guard();
        let cgroup = cgroup::cgroups()
            .create(limits)
            .map_err(std::io::Error::other)?
            .map(Arc::new);
        if let Some(cgroup) = &cgroup {
            let joined = cgroup.clone();
            // SAFETY: the hook only opens, writes and closes files whose paths were made
            // before the fork (`join_in_child`).
            unsafe {
                command.pre_exec(move || joined.join_in_child());
            }
        }
        let mut child = command.spawn()?;
        let pid = child.id().ok_or_else(|| std::io::Error::other("no pid"))? as i32;
        guard.add(pid, cgroup.clone(), sandbox);
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("stdout was not piped"))?;
        let stderr = child.stderr.take();
        let calls = PendingCalls::default();
        Ok((
            Self {
                group: ChildGroup {
                    pgid: pid,
                    leader: Some(child),
                },
                stdin: Arc::new(tokio::sync::Mutex::new(stdin)),
                reader: LineReader::new(stdout, max_message_bytes, calls.clone()),
                calls,
                cgroup,
                exit: ExitNote::default(),
                _egress: egress,
                sandboxed,
            },
            stderr,
        ))
    }

    pub fn pid(&self) -> u32 {
        self.group.pgid as u32
    }

    /// Where the reason the server's output ended will be.
    pub(crate) fn exit_note(&self) -> ExitNote {
        self.exit.clone()
    }

    /// What each limit of the server is, as its cgroup enforces it.
    pub(crate) fn limits(&self) -> StdioLimits {
        self.cgroup
            .as_ref()
            .map(|cgroup| cgroup.limits())
            .unwrap_or_default()
    }

    /// Records why the output ended: the leader's exit status (if it exits soon), and
    /// a limit the server went over.
    async fn note_exit(&mut self) {
        if self.exit.get().is_some() {
            return;
        }
        let status = match self.group.leader.as_mut() {
            Some(leader) => tokio::time::timeout(EXIT_WAIT, leader.wait())
                .await
                .ok()
                .and_then(Result::ok),
            None => None,
        };
        let limit = self.cgroup.as_ref().and_then(|cgroup| cgroup.explain());
        let status = status.map(|status| {
            use std::os::unix::process::ExitStatusExt as _;
            match status.code() {
                // bubblewrap's way of saying its child was killed by signal N.
                Some(code) if self.sandboxed && (129..=192).contains(&code) => {
                    std::process::ExitStatus::from_raw(code - 128)
                }
                _ => status,
            }
        });
        let _ = self.exit.set(describe_exit(status, limit));
    }
}

/// An ended server in words: how it ended, and why if a limit made it.
fn describe_exit(status: Option<std::process::ExitStatus>, limit: Option<String>) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    let ended = match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("the server exited with status {code}"),
            (None, Some(signal)) => match Signal::try_from(signal) {
                Ok(signal) => format!("the server was killed by {}", signal.as_str()),
                Err(_) => format!("the server was killed by signal {signal}"),
            },
            (None, None) => "the server exited".to_owned(),
        },
        None => "the server closed its output".to_owned(),
    };
    match limit {
        Some(limit) => format!("{ended}: {limit}"),
        None => ended,
    }
}

/// The error a transport operation reports.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("the server's stdin is closed")]
    Closed,
    #[error("writing to the server: {0}")]
    Io(#[from] std::io::Error),
    #[error("encoding a message: {0}")]
    Encode(#[from] serde_json::Error),
}

impl Transport<RoleClient> for StdioTransport {
    type Error = StdioError;

    fn name() -> std::borrow::Cow<'static, str> {
        "stdio".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let stdin = self.stdin.clone();
        self.calls.outgoing(&item);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            let mut stdin = stdin.lock().await;
            let pipe = stdin.as_mut().ok_or(StdioError::Closed)?;
            pipe.write_all(&line).await?;
            pipe.flush().await?;
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.reader.next_message().await;
        if message.is_none() {
            self.note_exit().await;
        }
        message
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // EOF on stdin is the MCP way to ask a stdio server to exit (the spec's shutdown
        // sequence); then the group is ended, whatever is left of it.
        self.stdin.lock().await.take();
        self.group.end().await;
        Ok(())
    }
}

/// A started server's process group. [`ChildGroup::end`] ends it in the MCP order; a
/// group dropped without that (a close that timed out, a failed handshake) is ended by a
/// task: SIGTERM at once, SIGKILL after [`TERM_GRACE`] for whatever is left.
struct ChildGroup {
    pgid: i32,
    /// `None` once the group has been ended.
    leader: Option<Child>,
}

impl ChildGroup {
    /// Waits briefly for the leader to exit on its own (its stdin is closed), then
    /// SIGTERM to the group, SIGKILL after the grace, and reaps the leader.
    async fn end(&mut self) {
        let pgid = self.pgid;
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let _ = tokio::time::timeout(EOF_GRACE, leader.wait()).await;
        end_group(pgid, leader).await;
        // Only now: if this is cancelled half-way, `Drop` still sees the leader.
        self.leader = None;
    }
}

/// How long a server whose stdin closed gets to exit before it is signalled.
const EOF_GRACE: Duration = Duration::from_millis(500);

async fn end_group(pgid: i32, leader: &mut Child) {
    // Read once more: what left the group since the last reading is ended too.
    guard().survey();
    let escaped = guard().escaped(pgid);
    signal_all(pgid, &escaped, Signal::SIGTERM);
    let gone = async {
        let _ = leader.wait().await;
        // Grandchildren are not ours to wait for: probe the group and the others.
        while group_alive(pgid) || any_alive(&escaped) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(TERM_GRACE, gone).await.is_err() {
        signal_all(pgid, &escaped, Signal::SIGKILL);
        let _ = leader.wait().await;
        // SIGKILL is not refused, but each process takes a moment to go, and one may have
        // forked between a reading of the cgroup and the kill: kill what is left again.
        let _ = tokio::time::timeout(TERM_GRACE, async {
            while any_alive(&escaped) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                signal_all(pgid, &escaped, Signal::SIGKILL);
            }
        })
        .await;
    }
    guard().remove(pgid);
}

/// `signal` to the group, to the groups its processes lead, to each process that left
/// it and is still the process that left (not a new one with its pid), and to every
/// process in the server's cgroup.
fn signal_all(pgid: i32, live: &LiveGroup, signal: Signal) {
    if let Some(cgroup) = &live.cgroup {
        cgroup.signal(signal);
    }
    let _ = killpg(Pid::from_raw(pgid), signal);
    for group in &live.escaped.groups {
        let _ = killpg(Pid::from_raw(*group), signal);
    }
    for (pid, start) in &live.escaped.processes {
        if tree::is_running(*pid, *start) {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), signal);
        }
    }
}

fn any_alive(live: &LiveGroup) -> bool {
    live.cgroup
        .as_ref()
        .is_some_and(|cgroup| !cgroup.members().is_empty())
        || live.escaped.groups.iter().any(|group| group_alive(*group))
        || live
            .escaped
            .processes
            .iter()
            .any(|(pid, start)| tree::is_running(*pid, *start))
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        let Some(mut leader) = self.leader.take() else {
            return;
        };
        let pgid = self.pgid;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { end_group(pgid, &mut leader).await });
            }
            Err(_) => {
                signal_all(pgid, &guard().escaped(pgid), Signal::SIGKILL);
                guard().remove(pgid);
            }
        }
    }
}

/// Whether any process is left in the group (signal 0 probes without signalling).
fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None::<Signal>).is_ok()
}

/// Processes of the service's live stdio servers beyond their leaders (each leader is
/// already counted as a connection), in their groups or not: what
/// `pool.max_stdio_processes` also counts.
pub(crate) fn extra_group_processes() -> usize {
    guard()
        .survey()
        .values()
        .map(|usage| usage.processes.saturating_sub(1))
        .sum()
}

/// Finds the service's cgroups (removing what a dead instance left) before the first
/// server starts, and warns of limits configured where none can be enforced.
pub fn prepare_containment(memory_limit: bool, task_limit: bool) {
    let cgroups = cgroup::cgroups();
    if memory_limit && !cgroups.memory() {
        tracing::warn!(
            "pool.stdio_memory_limit_mib is set, but no cgroup memory controller can be used here: stdio servers run without a memory limit"
        );
    }
    if task_limit && !cgroups.pids() {
        tracing::warn!(
            "pool.stdio_max_tasks_per_server is set, but no cgroup pids controller can be used here: stdio servers run without a task limit"
        );
    }
}

/// What each live stdio server runs now, by its process group: processes and resident
/// memory (a fresh reading of `/proc`).
pub fn group_usage() -> BTreeMap<i32, GroupUsage> {
    guard().survey()
}

/// A live server's group as the guard keeps it: what left the group, and its cgroup
/// where it has one (every process in it is the server's).
#[derive(Debug, Clone, Default)]
struct LiveGroup {
    escaped: tree::Escaped,
    cgroup: Option<Arc<ServerCgroup>>,
    sandbox: Option<tree::SandboxShape>,
}

/// The watchdog: `/bin/sh` reading `+pgid` and `-pgid` lines, in its own process group so
/// a terminal's Ctrl-C does not reach it. When its stdin closes (the service exited, or
/// was killed with SIGKILL) it kills every group still listed and every process in the
/// servers' cgroups (its arguments are the directories that hold them), then exits.
pub(crate) struct GroupGuard {
    pipe: Mutex<Option<std::process::ChildStdin>>,
    /// Each live group, with what left it.
    live: Mutex<BTreeMap<i32, LiveGroup>>,
    page_bytes: u64,
}

const GUARD_SCRIPT: &str = r#"
trap '' INT TERM HUP
groups=" "
while IFS= read -r line; do
  case "$line" in
    +*) groups="$groups${line#+} " ;;
    -*) id="${line#-}"
        case "$groups" in *" $id "*) groups="${groups%% $id *} ${groups#* $id }" ;; esac ;;
  esac
done
for group in $groups; do kill -KILL "-$group" 2>/dev/null; done
for pass in 1 2 3; do
  for base in "$@"; do
    for server in "$base"/server-*/; do
      [ -e "${server}cgroup.procs" ] || continue
      [ -e "${server}cgroup.kill" ] && echo 1 > "${server}cgroup.kill"
      while IFS= read -r pid; do kill -KILL "$pid" 2>/dev/null; done < "${server}cgroup.procs"
    done
  done
done
"#;

/// The process's one guard, started on first use.
pub fn guard() -> &'static GroupGuard {
    static GUARD: OnceLock<GroupGuard> = OnceLock::new();
    GUARD.get_or_init(|| {
        use std::os::unix::process::CommandExt as _;
        let started = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(GUARD_SCRIPT)
            .arg("mcp-pool-guard")
            .args(cgroup::cgroups().bases())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        let pipe = match started {
            Ok(mut child) => {
                let pipe = child.stdin.take();
                // Reaped by a thread of its own; it only exits after the service.
                std::thread::spawn(move || child.wait());
                pipe
            }
            Err(error) => {
                tracing::warn!(%error, "no stdio process guard: children may outlive a crash");
                None
            }
        };
        // Processes that leave a group are found while their parent lives: look often.
        let surveyor = std::thread::Builder::new()
            .name("stdio-survey".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(tree::SURVEY_EVERY);
                    guard().survey();
                }
            });
        if let Err(error) = surveyor {
            tracing::warn!(%error, "stdio processes are surveyed only when counted or stopped");
        }
        GroupGuard {
            pipe: Mutex::new(pipe),
            live: Mutex::new(BTreeMap::new()),
            page_bytes: tree::page_bytes(),
        }
    })
}

impl GroupGuard {
    fn tell(&self, line: String) {
        if let Some(pipe) = self.pipe.lock().expect("guard pipe").as_mut() {
            // Lines are far below PIPE_BUF: each write is atomic, and the guard only reads.
            let _ = pipe.write_all(line.as_bytes());
        }
    }

    // The watchdog is told while the list is locked, so that it hears of a group in the
    // order the list changed (a survey's `+` never after the `-` of its server's end).

    fn add(
        &self,
        pgid: i32,
        cgroup: Option<Arc<ServerCgroup>>,
        sandbox: Option<tree::SandboxShape>,
    ) {
        let mut live = self.live.lock().expect("guard list");
        live.insert(
            pgid,
            LiveGroup {
                escaped: tree::Escaped::default(),
                cgroup,
                sandbox,
            },
        );
        self.tell(format!("+{pgid}\n"));
    }

    /// Forgets the group and the groups its processes led.
    fn remove(&self, pgid: i32) {
        let mut live = self.live.lock().expect("guard list");
        let groups = live
            .remove(&pgid)
            .map(|e| e.escaped.groups)
            .unwrap_or_default();
        for group in std::iter::once(pgid).chain(groups) {
            self.tell(format!("-{group}\n"));
        }
    }

    /// What left the group, as last read.
    fn escaped(&self, pgid: i32) -> LiveGroup {
        self.live
            .lock()
            .expect("guard list")
            .get(&pgid)
            .cloned()
            .unwrap_or_default()
    }

    /// Reads `/proc` once: records what left each live group (listing the groups its
    /// processes lead, so that a SIGKILL of the service ends them too) and tells what
    /// each group's server runs.
    fn survey(&self) -> BTreeMap<i32, GroupUsage> {
        if self.live.lock().expect("guard list").is_empty() {
            return BTreeMap::new();
        }
        let table = tree::ProcessTable::read();
        let mut usage = BTreeMap::new();
        let mut live = self.live.lock().expect("guard list");
        for (pgid, group) in live.iter_mut() {
            let in_cgroup = group
                .cgroup
                .as_ref()
                .map(|cgroup| cgroup.members())
                .unwrap_or_default();
            let (now, new_groups) =
                group
                    .escaped
                    .survey(*pgid, in_cgroup, &table, self.page_bytes, group.sandbox);
            usage.insert(*pgid, now);
            for group in new_groups {
                self.tell(format!("+{group}\n"));
            }
        }
        usage
    }
}

/// Newline-delimited messages with a size limit. A line over the limit is skipped without
/// being buffered; when its request id can be found (in its head, where rmcp and the
/// Python SDK put it, or its tail, where the TypeScript SDK does) the waiting request is
/// answered at once with [`MESSAGE_TOO_LARGE_CODE`].
struct LineReader<R> {
    read: BufReader<R>,
    line: Vec<u8>,
    max: usize,
    calls: PendingCalls,
    /// Set while the rest of an oversized line is being skipped (reads may be cancelled
    /// between chunks, so this lives here and not on the stack).
    skipping: Option<Skipped>,
}

struct Skipped {
    head: Vec<u8>,
    tail: Vec<u8>,
    bytes: usize,
}

impl<R: tokio::io::AsyncRead + Unpin + Send> LineReader<R> {
    fn new(read: R, max: usize, calls: PendingCalls) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            max,
            calls,
            skipping: None,
        }
    }

    async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let (consumed, done) = {
                let available = match self.read.fill_buf().await {
                    Ok(available) => available,
                    Err(error) => {
                        tracing::warn!(%error, "reading from a stdio server failed");
                        return None;
                    }
                };
                if available.is_empty() {
                    return None;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let chunk = &available[..newline.map_or(available.len(), |i| i + 1)];
                if let Some(skipped) = self.skipping.as_mut() {
                    skipped.push(chunk);
                } else if self.line.len() + chunk.len() > self.max {
                    let mut skipped = Skipped {
                        head: Vec::new(),
                        tail: Vec::new(),
                        bytes: 0,
                    };
                    skipped.push(&self.line);
                    skipped.push(chunk);
                    self.line = Vec::new();
                    self.skipping = Some(skipped);
                } else {
                    self.line.extend_from_slice(chunk);
                }
                (chunk.len(), newline.is_some())
            };
            self.read.consume(consumed);
            if !done {
                continue;
            }
            if let Some(skipped) = self.skipping.take() {
                if let Some(answer) = skipped.answer(self.max) {
                    return Some(answer);
                }
                continue;
            }
            let parsed = parse_line(&self.line, &self.calls);
            self.line.clear();
            if self.line.capacity() > KEPT_BUFFER {
                self.line.shrink_to(KEPT_BUFFER);
            }
            if let Some(message) = parsed {
                return Some(message);
            }
        }
    }
}

impl Skipped {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len();
        if self.head.len() < ID_WINDOW {
            let take = (ID_WINDOW - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
        }
        self.tail
            .extend_from_slice(&chunk[chunk.len().saturating_sub(ID_WINDOW)..]);
        if self.tail.len() > ID_WINDOW {
            self.tail.drain(..self.tail.len() - ID_WINDOW);
        }
    }

    /// The error answer for the request this line answered, when its id can be found.
    fn answer(self, max: usize) -> Option<RxJsonRpcMessage<RoleClient>> {
        static HEAD: OnceLock<Regex> = OnceLock::new();
        static TAIL: OnceLock<Regex> = OnceLock::new();
        let id = r#"(-?\d+|"(?:[^"\\]|\\.)*")"#;
        let head = HEAD.get_or_init(|| {
            Regex::new(&format!(
                r#"^\s*\{{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*{id}"#
            ))
            .expect("a valid pattern")
        });
        let tail = TAIL.get_or_init(|| {
            Regex::new(&format!(
                r#""id"\s*:\s*{id}\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}}\s*$"#
            ))
            .expect("a valid pattern")
        });
        let found = head
            .captures(&self.head)
            .or_else(|| tail.captures(&self.tail))
            .and_then(|c| serde_json::from_slice::<serde_json::Value>(&c[1]).ok());
        let Some(id) = found else {
            tracing::error!(
                bytes = self.bytes,
                max,
                "a stdio server sent a message over the size limit; it was dropped"
            );
            return None;
        };
        tracing::warn!(
            bytes = self.bytes,
            max,
            "a stdio server's answer is over the size limit; its request fails"
        );
        serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": MESSAGE_TOO_LARGE_CODE,
                "message": format!("the answer is larger than the service accepts ({max} bytes)"),
                "data": {"limitBytes": max},
            }
        }))
        .ok()
    }
}

/// A message whose answer, if it is one, is read as a tool result.
type ToolCallMessage = JsonRpcMessage<ServerRequest, CallToolResult, ServerNotification>;

/// One message, or `None` for a line that is empty or not a message (logged).
///
/// While calls are unanswered, a line is first read as a tool call's answer: taken when it
/// answers one of them; requests, notifications and errors read this way are taken as they
/// are. Anything else (an answer to another request, a line this reading refuses) is read
/// the general way, as rmcp would, so a call's answer that is not a plain tool result (a
/// task, an input request) comes out just as before.
fn parse_line(line: &[u8], calls: &PendingCalls) -> Option<RxJsonRpcMessage<RoleClient>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let any_pending = !calls.set().is_empty();
    if any_pending && let Ok(message) = serde_json::from_slice::<ToolCallMessage>(line) {
        match message {
            JsonRpcMessage::Response(answer) if calls.answered(&answer.id) => {
                return Some(JsonRpcMessage::Response(JsonRpcResponse {
                    jsonrpc: answer.jsonrpc,
                    id: answer.id,
                    result: ServerResult::CallToolResult(answer.result),
                }));
            }
            JsonRpcMessage::Response(_) => {}
            JsonRpcMessage::Request(request) => return Some(JsonRpcMessage::Request(request)),
            JsonRpcMessage::Notification(notification) => {
                return Some(JsonRpcMessage::Notification(notification));
            }
            JsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    calls.answered(id);
                }
                return Some(JsonRpcMessage::Error(error));
            }
        }
    }
    match serde_json::from_slice(line) {
        Ok(message) => {
            if any_pending && let JsonRpcMessage::Response(JsonRpcResponse { id, .. }) = &message {
                calls.answered(id);
            }
            Some(message)
        }
        Err(error) => {
            tracing::debug!(%error, "ignored a line from a stdio server that is not a message");
            None
        }
    }
}

/// Whether the guard lists a group (for tests).
#[cfg(test)]
pub(crate) fn guard_lists(pgid: i32) -> bool {
    guard().live.lock().expect("guard list").contains_key(&pgid)
}

mod cgroup;
#[cfg(test)]
mod tests;
mod tree;

use cgroup::ServerCgroup;
pub use cgroup::StdioLimits;

pub use tree::GroupUsage;
