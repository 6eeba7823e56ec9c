use super::*;

#[test]
fn a_runtime_is_bound_from_the_prefix_above_its_bin() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("node/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let program = bin.join("node");
    std::fs::write(&program, "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let found = installation_of("node", Some(&bin.display().to_string()));
    assert_eq!(found, vec![dir.path().join("node")]);
    let alone = dir.path().join("tool");
    std::fs::copy(&program, &alone).unwrap();
    assert_eq!(
        installation_of(&alone.display().to_string(), None),
        vec![alone.clone()]
    );
    assert!(installation_of("no-such-program-here", Some("/nowhere")).is_empty());
}

#[test]
fn the_sandboxs_etc_has_its_own_users_and_no_keys() {
    let dir = tempfile::tempdir().unwrap();
    let etc = etc::prepare(dir.path()).unwrap();
    let passwd = std::fs::read_to_string(etc.join("passwd")).unwrap();
    assert!(passwd.contains("mcp:x:1000:1000"), "{passwd}");
    assert!(
        !passwd.contains("postgres"),
        "no host user is listed: {passwd}"
    );
    assert!(!etc.join("shadow").exists());
    assert!(!etc.join("ssl/private").exists());
    if std::path::Path::new("/etc/ssl/certs").exists() {
        assert!(etc.join("ssl/certs").exists());
    }
    // Made again at the next start, replacing the last one.
    std::fs::write(etc.join("stale"), "x").unwrap();
    let again = etc::prepare(dir.path()).unwrap();
    assert!(!again.join("stale").exists());
}
