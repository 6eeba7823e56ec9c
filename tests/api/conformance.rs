//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance` 0.1.16, and
//! its 0.2.0 line for 2026-07-28): every active server scenario through the gateway, which
//! must pass every scenario its everything-server passes alone (`tests/conformance/run.sh`),
//! and the client scenarios of each revision with the pool as the client
//! (`tests/conformance/client.sh`). All need `tests/setup.sh`.

#[tokio::test]
async fn the_gateway_passes_what_the_server_alone_passes() {
    run_server_scenarios("2025").await;
}

/// The scenarios 2026-07-28 requires, by the suite's 0.2.0 line against the conformance
/// repository's everything-server of that line (`SPEC=2026-07-28`).
#[tokio::test]
async fn the_gateway_passes_what_the_server_alone_passes_in_2026_07_28() {
    run_server_scenarios("2026-07-28").await;
}

/// The 0.2.0 line's scenarios of 2025-11-25 against the same everything-server, which
/// speaks both revisions (`SPEC=2025-11-25`): a 2025-11-25 client through the gateway gets
/// what that server shows its revision, although the pool speaks 2026-07-28 to it.
#[tokio::test]
async fn the_gateway_passes_what_the_server_alone_passes_to_2025_11_25_clients() {
    run_server_scenarios("2025-11-25").await;
}

/// The suite's `tasks-*` scenarios (the tasks extension) against the gateway's own task
/// runner in front of the stdio fixture (`tests/conformance/tasks.sh`): every scenario
/// `tasks-must-pass.txt` lists passes.
#[tokio::test]
async fn the_gateway_runs_calls_as_tasks_as_the_tasks_extension_asks() {
    run_script(
        "tasks.sh",
        &[("FIXTURE", crate::upstreams::fixture_binary())],
    )
    .await;
}

/// The same scenarios with an upstream that serves the tasks extension itself (the fixture
/// with `--serve-tasks`): the gateway follows its tasks and passes every scenario that
/// upstream passes alone, over streamable HTTP and over stdio (`MODE=upstream`).
#[tokio::test]
async fn the_gateway_passes_what_a_task_serving_upstream_passes_alone() {
    run_script(
        "tasks.sh",
        &[
            ("FIXTURE", crate::upstreams::fixture_binary()),
            ("MODE", "upstream"),
        ],
    )
    .await;
}

async fn run_server_scenarios(spec: &str) {
    run_script("run.sh", &[("SPEC", spec)]).await;
}

/// Runs one of `tests/conformance/`'s server-side scripts with `STRICT=1`: it must pass and
/// print its results.
async fn run_script(script: &str, env: &[(&str, &str)]) {
    let path = format!("{}/tests/conformance/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new("bash")
        .arg(path)
        .envs(env.iter().copied())
        .env("STRICT", "1")
        // The service under test keeps to its own SQLite file in a temporary directory.
        .env_remove("DATABASE_URL")
        .env("POOL", env!("CARGO_BIN_EXE_mcp-pool"))
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{script} starts: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{script} {env:?}: the gateway fails scenarios it must pass:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("passed "),
        "the suite printed no results:\n{stdout}\n{stderr}"
    );
}

/// The suite's client scenarios of 2025-03-26 to 2025-11-25 (0.1.16) with the pool as the
/// client (`tests/conformance/client.sh`): every one passes but those listed, with the
/// reason, in `tests/conformance/client-expected-failures.txt`, and every listed one still
/// fails.
#[tokio::test]
async fn the_pool_as_a_client_passes_the_client_scenarios() {
    run_client_scenarios("2025").await;
}

/// The same for every client scenario 2026-07-28 requires, by the suite's 0.2.0 line
/// (`SPEC=2026-07-28`, listed failures in `client-expected-failures-2026-07-28.txt`).
#[tokio::test]
async fn the_pool_as_a_client_passes_the_2026_07_28_client_scenarios() {
    run_client_scenarios("2026-07-28").await;
}

async fn run_client_scenarios(spec: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/client.sh");
    let out = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new("bash")
        .arg(script)
        .env("SPEC", spec)
        .env("STRICT", "1")
        .env("OUT", out.path())
        .env_remove("DATABASE_URL")
        .env("POOL", env!("CARGO_BIN_EXE_mcp-pool"))
        .kill_on_drop(true)
        .output()
        .await
        .expect("client.sh starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{spec} client scenarios fail that are not expected to, or pass though listed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("passed "),
        "the suite printed no results:\n{stdout}\n{stderr}"
    );
}
