//! The binary's commands, run as a user would run them.

use std::process::Command;

fn mcp_pool(data_dir: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-pool"));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("MCP_POOL__STORAGE__DATA_DIR", data_dir)
        .current_dir(data_dir);
    command
}

#[test]
fn config_check_accepts_the_defaults_and_names_a_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let ok = mcp_pool(dir.path())
        .args(["config", "check"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        stdout.contains("configuration OK") && stdout.contains("mcp-pool.db"),
        "{stdout}"
    );

    let bad = mcp_pool(dir.path())
        .args(["config", "check"])
        .env("MCP_POOL__POOL__IDLE_TIMEOUT_SECS", "soon")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("idle_timeout_secs"), "{stderr}");

    let zero = mcp_pool(dir.path())
        .args(["config", "check"])
        .env("MCP_POOL__AGENT__MAX_TOOL_ROUNDS", "0")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&zero.stderr).contains("agent.max_tool_rounds"));

    let typo = mcp_pool(dir.path())
        .args(["config", "check"])
        .env("MCP_POOL__POOL__IDEL_TIMEOUT_SECS", "5")
        .output()
        .unwrap();
    assert!(!typo.status.success(), "an unknown key is an error");
    assert!(String::from_utf8_lossy(&typo.stderr).contains("idel_timeout_secs"));
}

#[test]
fn a_tool_search_model_that_cannot_be_read_stops_the_service_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let model = tempfile::tempdir().unwrap();
    let serve = |model: &std::path::Path| {
        mcp_pool(dir.path())
            .arg("serve")
            .env("MCP_POOL__SERVER__PORT", "0")
            .env("MCP_POOL__GRPC__PORT", "0")
            .env("MCP_POOL__TOOL_SEARCH__MODEL_DIR", model)
            .output()
            .unwrap()
    };
    // No model in the directory: refused with the configuration.
    let empty = serve(model.path());
    assert!(!empty.status.success());
    let stderr = String::from_utf8_lossy(&empty.stderr);
    assert!(
        stderr.contains("tool_search.model_dir") && stderr.contains("sp.model"),
        "{stderr}"
    );
    // Files that are not the model: refused when it is loaded, in words.
    std::fs::write(model.path().join("sp.model"), b"not a model").unwrap();
    std::fs::write(model.path().join("weights.npz"), b"nor weights").unwrap();
    let broken = serve(model.path());
    assert!(!broken.status.success());
    let stderr = String::from_utf8_lossy(&broken.stderr);
    let failed = stderr
        .lines()
        .find(|line| line.contains("start-up failed"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        failed.contains("sp.model") && failed.contains("not a SentencePiece model"),
        "{failed}"
    );
    assert!(!failed.contains("::"), "{failed}");
}

#[test]
fn migrate_and_keys_create_work_on_the_embedded_database() {
    let dir = tempfile::tempdir().unwrap();
    let migrate = mcp_pool(dir.path()).arg("migrate").output().unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(dir.path().join("mcp-pool.db").exists());
    assert!(dir.path().join("encryption.key").exists());

    let key = mcp_pool(dir.path())
        .args(["keys", "create", "--role", "service", "--name", "ci"])
        .output()
        .unwrap();
    assert!(
        key.status.success(),
        "{}",
        String::from_utf8_lossy(&key.stderr)
    );
    let printed = String::from_utf8_lossy(&key.stdout);
    assert!(
        printed.trim().starts_with("mcpp_") && printed.trim().len() == 37,
        "{printed}"
    );
    let bad_role = mcp_pool(dir.path())
        .args(["keys", "create", "--role", "root"])
        .output()
        .unwrap();
    assert!(!bad_role.status.success());
}
