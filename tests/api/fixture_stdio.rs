//! The stdio fixture is the upstream of most tests and of every comparison the load tool
//! makes. It serves its pipes as non-blocking pipes: through tokio's blocking pool (rmcp's
//! `stdio()`), each call cost it as much CPU as the whole service spends, which capped what
//! the load tool could measure. Its output redirected to a file, it still answers.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::upstreams::{eventually, fixture_binary};

const O_NONBLOCK: u32 = 0o4000;

fn initialize() -> String {
    let message = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    format!("{message}\n")
}

fn echo_call(text: &str) -> String {
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}}});
    format!("{initialized}\n{call}\n")
}

/// The open-file flags of `pid`'s descriptor `fd` (`/proc/PID/fdinfo/FD`).
fn fd_flags(pid: u32, fd: u32) -> u32 {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).expect("fdinfo");
    let flags = info
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .expect("a flags line");
    u32::from_str_radix(flags.trim(), 8).expect("octal flags")
}

#[tokio::test]
async fn the_fixture_reads_and_writes_its_pipes_without_blocking() {
    let mut child = Command::new(fixture_binary())
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the fixture");
    let pid = child.id().expect("pid");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    stdin.write_all(initialize().as_bytes()).await.unwrap();
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(answer["id"], 0, "{answer}");
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");

    for fd in [0, 1] {
        assert_ne!(
            fd_flags(pid, fd) & O_NONBLOCK,
            0,
            "the fixture's fd {fd} is served through tokio's blocking pool"
        );
    }
    stdin
        .write_all(echo_call("through a pipe").as_bytes())
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "through a pipe");
}

#[tokio::test]
async fn the_fixture_answers_into_a_file() {
    let output = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(fixture_binary())
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(output.reopen().unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the fixture");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(format!("{}{}", initialize(), echo_call("through a file")).as_bytes())
        .await
        .unwrap();
    let path = output.path().to_owned();
    eventually("the echo's answer is in the file", || {
        let path = path.clone();
        async move {
            std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .any(|line| {
                    serde_json::from_str::<Value>(line).is_ok_and(|answer| {
                        answer["id"] == 1
                            && answer["result"]["content"][0]["text"] == "through a file"
                    })
                })
        }
    })
    .await;
    // Its stdin is a pipe but stdout is not: neither is made non-blocking, since rmcp's
    // blocking stdio serves both.
    let pid = child.id().expect("pid");
    assert_eq!(fd_flags(pid, 0) & O_NONBLOCK, 0);
    drop(stdin);
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status}");
}
