//! The processes a stdio server started, wherever they went.
//!
//! A server's process group holds what it starts unless a process leaves it: `setsid` or
//! `setpgid`, as Playwright and Chrome DevTools start Chromium. Such a process is found by
//! parentage (its parent is one of the server's) in a reading of `/proc`, and from then on
//! is known by pid and start time, so that it stays the server's when its parent exits:
//! it is counted against the limits, signalled on every stop, and its own group is listed
//! with the guard for a SIGKILL of the service. A process that leaves and whose parent
//! exits before any reading saw it is not found by parentage (a double fork), only by
//! the server's cgroup where it has one: its members, read by the caller, are taken in
//! with each survey. The service reads `/proc` every [`SURVEY_EVERY`] while stdio servers
//! run, and before each stop.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// How often the live servers' processes are read again.
pub(super) const SURVEY_EVERY: Duration = Duration::from_secs(1);

/// One process, from `/proc/<pid>/stat`.
#[derive(Clone, Copy)]
struct Process {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    /// Clock ticks after boot: with the pid, names one process even if the pid is reused.
    start: u64,
    rss_pages: u64,
    /// Named `mcp-pool-egress`: the egress forwarder of a sandbox, when it is where one is.
    forwarder: bool,
}

/// One reading of `/proc`: every live process (zombies left out), by pid and by parent.
pub(super) struct ProcessTable {
    processes: HashMap<i32, Process>,
    children: HashMap<i32, Vec<i32>>,
}

impl ProcessTable {
    pub(super) fn read() -> Self {
        let mut processes = HashMap::new();
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            if let Some(process) = parse_stat(pid, &stat) {
                children.entry(process.ppid).or_default().push(pid);
                processes.insert(pid, process);
            }
        }
        Self {
            processes,
            children,
        }
    }

    /// Whether `pid` is still the process that started at `start`.
    fn is_same(&self, pid: i32, start: u64) -> bool {
        self.processes.get(&pid).is_some_and(|p| p.start == start)
    }

    /// `root` and every process beneath it, into `into`.
    fn subtree(&self, root: i32, into: &mut BTreeSet<i32>) {
        let mut stack = vec![root];
        while let Some(pid) = stack.pop() {
            if self.processes.contains_key(&pid) && into.insert(pid) {
                stack.extend(self.children.get(&pid).into_iter().flatten());
            }
        }
    }

    /// A sandboxed server's sandbox: its leader (bubblewrap), the leader's child
    /// (bubblewrap's init in the pid namespace), and with egress the one forwarder
    /// the server's first process started. Counted by place in the tree, so a server
    /// naming its processes `bwrap` hides nothing; one forwarder at most is taken.
    fn sandbox_processes(
        &self,
        leader: i32,
        shape: SandboxShape,
        members: &BTreeSet<i32>,
    ) -> usize {
        let children = |pid: i32| {
            self.children
                .get(&pid)
                .into_iter()
                .flatten()
                .copied()
                .filter(|child| members.contains(child))
                .collect::<Vec<_>>()
        };
        let inits = children(leader);
        let forwarders = if shape.egress {
            inits
                .iter()
                .flat_map(|init| children(*init))
                .flat_map(children)
                .find(|pid| self.processes.get(pid).is_some_and(|p| p.forwarder))
                .map_or(0, |_| 1)
        } else {
            0
        };
        usize::from(members.contains(&leader)) + inits.len() + forwarders
    }

    fn in_groups<'a>(&'a self, groups: &'a BTreeSet<i32>) -> impl Iterator<Item = i32> + 'a {
        self.processes
            .values()
            .filter(|p| groups.contains(&p.pgrp))
            .map(|p| p.pid)
    }
}

/// Whether `pid` is still the (live) process that started at `start`: one file read,
/// for the few processes a stop signals and waits for.
pub(super) fn is_running(pid: i32, start: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| parse_stat(pid, &stat))
        .is_some_and(|process| process.start == start)
}

/// A process's start time (clock ticks after boot) from its `stat` line.
pub(super) fn start_time(pid: i32, stat: &str) -> Option<u64> {
    parse_stat(pid, stat).map(|process| process.start)
}

/// `pid (comm) state ppid pgrp session … starttime(22) vsize rss(24) …`; `comm` may hold
/// spaces and parentheses, so fields are counted after its last `)`.
fn parse_stat(pid: i32, stat: &str) -> Option<Process> {
    let close = stat.rfind(')')?;
    let comm = stat.get(stat.find('(')? + 1..close)?;
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // Field N of the man page is fields[N - 3].
    if fields.first() == Some(&"Z") {
        return None;
    }
    Some(Process {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
        rss_pages: fields.get(21)?.parse().ok()?,
        // The kernel keeps 15 bytes of a name: the whole of this one.
        forwarder: comm == "mcp-pool-egress",
    })
}

/// How a server is sandboxed, for what the survey leaves out of its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SandboxShape {
    /// An egress forwarder runs beside the server.
    pub egress: bool,
}

/// What a server runs now: its processes (its sandbox's own left out) and their resident
/// memory (the sandbox's included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupUsage {
    pub processes: usize,
    pub memory_bytes: u64,
}

/// The processes of one server that left its group.
#[derive(Debug, Clone, Default)]
pub(super) struct Escaped {
    /// pid → start time.
    pub(super) processes: BTreeMap<i32, u64>,
    /// Groups led by one of the server's processes (a `setsid` makes one), listed with
    /// the guard.
    pub(super) groups: BTreeSet<i32>,
}

impl Escaped {
    /// Finds the processes of the server whose group is `pgid` in `table` (and those in
    /// its cgroup, `in_cgroup`), records those that left the group, and tells what the
    /// server runs (not counting its sandbox's own processes, `sandbox`). Returns the
    /// groups newly led by one of its processes.
    pub(super) fn survey(
        &mut self,
        pgid: i32,
        in_cgroup: Vec<i32>,
        table: &ProcessTable,
        page_bytes: u64,
        sandbox: Option<SandboxShape>,
    ) -> (GroupUsage, Vec<i32>) {
        self.processes
            .retain(|pid, start| table.is_same(*pid, *start));
        let led: BTreeSet<i32> = table.processes.values().map(|p| p.pgrp).collect();
        self.groups.retain(|group| led.contains(group));
        let mut groups = self.groups.clone();
        groups.insert(pgid);
        let mut members = BTreeSet::new();
        let roots: Vec<i32> = table
            .in_groups(&groups)
            .chain(self.processes.keys().copied())
            .chain(in_cgroup)
            .collect();
        for root in roots {
            table.subtree(root, &mut members);
        }
        let mut new_groups = Vec::new();
        let mut memory_pages = 0;
        for pid in &members {
            let process = table.processes[pid];
            memory_pages += process.rss_pages;
            if process.pgrp == pgid {
                continue;
            }
            self.processes.entry(*pid).or_insert(process.start);
            // Only a group one of the server's own processes leads is the server's to end.
            if members.contains(&process.pgrp) && self.groups.insert(process.pgrp) {
                new_groups.push(process.pgrp);
            }
        }
        let own = sandbox.map_or(0, |shape| table.sandbox_processes(pgid, shape, &members));
        let usage = GroupUsage {
            processes: members.len().saturating_sub(own),
            memory_bytes: memory_pages * page_bytes,
        };
        (usage, new_groups)
    }
}

/// The size of a memory page, for `rss` counted in pages.
pub(super) fn page_bytes() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|size| u64::try_from(size).ok())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::parse_stat;

    #[test]
    fn a_stat_line_with_spaces_and_parentheses_in_its_name_is_read() {
        let line = "4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1234567 321 18446744073709551615";
        let process = parse_stat(4242, line).expect("a process");
        assert_eq!(
            (process.ppid, process.pgrp, process.start, process.rss_pages),
            (17, 4242, 987_654, 321)
        );
        assert!(parse_stat(1, "1 (zombie) Z 0 1 1 0").is_none());
    }
}
