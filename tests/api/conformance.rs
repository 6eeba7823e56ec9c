//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance` 0.1.16,
//! every active server scenario) through the gateway: it must pass every scenario its
//! everything-server passes alone (`tests/conformance/run.sh`, installed by
//! `tests/setup.sh`).

#[tokio::test]
async fn the_gateway_passes_what_the_server_alone_passes() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/run.sh");
    let output = tokio::process::Command::new("bash")
        .arg(script)
        .env("STRICT", "1")
        // The service under test keeps to its own SQLite file in a temporary directory.
        .env_remove("DATABASE_URL")
        .env("POOL", env!("CARGO_BIN_EXE_mcp-pool"))
        .kill_on_drop(true)
        .output()
        .await
        .expect("run.sh starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the gateway fails scenarios the server alone passes:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("passed "),
        "the suite printed no results:\n{stdout}\n{stderr}"
    );
}
