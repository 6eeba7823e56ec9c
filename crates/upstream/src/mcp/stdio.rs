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
//!   with SIGKILL: a small watchdog process (`guard::GroupGuard`) holds the list of live
//!   groups and kills them, and empties the servers' cgroups, when the service's end of
//!   its pipe closes;
//! - a server's cgroup carries its memory and process limits, and when its output ends
//!   the transport says why (its exit status, a limit it went over) for the error its
//!   callers and the connection's state show;
//! - a message over the size limit must fail the request it answers at once (rmcp drops
//!   the line and the call hangs until its timeout), and a large message must not leave
//!   its buffer behind (rmcp keeps the read buffer at its largest size for the life of
//!   the connection: 16 MiB per connection after one big result).

use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

/// The JSON-RPC error code the transport answers an oversized message with; the client
/// turns it into [`super::McpError::ResultTooLarge`].
pub(crate) const MESSAGE_TOO_LARGE_CODE: i32 = -32_099;

/// How long a stopping group gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

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
pub(crate) fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None::<Signal>).is_ok()
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

mod cgroup;
mod guard;
mod lines;
#[cfg(test)]
mod tests;
mod tree;

use guard::LiveGroup;
pub(crate) use guard::extra_group_processes;
#[cfg(test)]
pub(crate) use guard::guard_lists;
pub use guard::{group_usage, guard};
use lines::{LineReader, PendingCalls};

use cgroup::ServerCgroup;
pub use cgroup::StdioLimits;

pub use tree::GroupUsage;
