//! What a catalog entry puts on a runtime's command line, checked by each registry's own
//! naming rules. An entry is third-party input (a registry's publisher), and npx, uvx and
//! docker read an argument that starts with `-` as an option of their own: `npx
//! "--call=…"` runs a shell command.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::{Argument, Package, PackageRuntime, ServerJson};
use crate::invalid::InvalidInput;

/// Longest identifier any registry here allows (npm: 214, OCI names: 255).
const MAX_IDENTIFIER: usize = 255;
/// Longest version (OCI tags: 128).
const MAX_VERSION: usize = 128;

/// npm (`validate-npm-package-name`): URL-safe characters, an optional `@scope/`, not
/// starting with `.` or `_`; capitals only in names older than the rule, kept here.
static NPM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:@[A-Za-z0-9~][A-Za-z0-9._~-]*/)?[A-Za-z0-9~][A-Za-z0-9._~-]*$")
        .expect("npm's name pattern compiles")
});

/// PyPI (the core metadata's `Name`, PEP 508): letters, digits, `.`, `_`, `-`, starting
/// and ending with a letter or digit.
static PYPI: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?i:[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$")
        .expect("PyPI's name pattern compiles")
});

/// An OCI image reference (the distribution project's grammar, `reference.go`):
/// `[domain[:port]/]path[:tag][@digest]`.
static OCI: LazyLock<Regex> = LazyLock::new(|| {
    let component = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
    let domain = format!(r"{component}(?:\.{component})*(?::[0-9]+)?");
    let path = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*";
    let tag = r"[\w][\w.-]{0,127}";
    let digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    Regex::new(&format!(
        r"^(?:{domain}/)?{path}(?:/{path})*(?::{tag})?(?:@{digest})?$"
    ))
    .expect("the OCI reference pattern compiles")
});

/// Another registry type's identifier (NuGet ids, MCPB URLs, an operator's own): no
/// white space, quotes or shell characters, starting with a letter, digit, `@` or `_`.
static OTHER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9@_][A-Za-z0-9@/._:+~=-]*$").expect("the identifier pattern compiles")
});

/// A version: letters, digits and `.`, `_`, `+`, `~`, `-`, starting with a letter or digit.
static VERSION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._+~-]*$").expect("the version pattern compiles")
});

/// A runtime argument's flag: `--name` or `-n`.
static FLAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^--?[A-Za-z0-9][A-Za-z0-9-]*$").expect("the flag pattern compiles")
});

impl ServerJson {
    /// Checks what each package would put on a runtime's command line: its identifier and
    /// version by its registry's rules, and its runtime arguments (only named flags; with
    /// `runtimes`, only those its runtime allows).
    pub fn check_packages(
        &self,
        runtimes: Option<&BTreeMap<String, PackageRuntime>>,
    ) -> Result<(), InvalidInput> {
        for (i, package) in self.packages.iter().enumerate() {
            let runtime = runtimes.and_then(|r| r.get(&package.registry_type));
            check_package(package, &self.version, runtime, &format!("packages[{i}]"))?;
        }
        Ok(())
    }
}

/// `packages[i]`: where `package` is in the entry.
pub(super) fn position(packages: &[Package], package: &Package) -> String {
    let i = packages
        .iter()
        .position(|p| std::ptr::eq(p, package))
        .unwrap_or_default();
    format!("packages[{i}]")
}

/// One package's identifier, version (its own, else the entry's) and runtime arguments.
pub(super) fn check_package(
    package: &Package,
    entry_version: &str,
    runtime: Option<&PackageRuntime>,
    at: &str,
) -> Result<(), InvalidInput> {
    check_identifier(&package.registry_type, &package.identifier, at)?;
    check_version(package.version.as_deref().unwrap_or(entry_version), at)?;
    let kind = &package.registry_type;
    for (j, argument) in package.runtime_arguments.iter().enumerate() {
        let at = format!("{at}.runtimeArguments[{j}]");
        let Argument::Named { name, .. } = argument else {
            return Err(InvalidInput::value(format!(
                "{at}: a positional runtime argument would reach the {kind} runtime as its own; only named flags the operator allows are passed to a runtime"
            )));
        };
        if !FLAG.is_match(name) {
            return Err(InvalidInput::value(format!(
                "{at}: '{}' is not a flag (--name or -n)",
                shown(name)
            )));
        }
        if let Some(runtime) = runtime
            && !runtime.allowed_runtime_flags.iter().any(|f| f == name)
        {
            let allowed = if runtime.allowed_runtime_flags.is_empty() {
                "none".to_owned()
            } else {
                runtime.allowed_runtime_flags.join(", ")
            };
            return Err(InvalidInput::value(format!(
                "{at}: '{name}' is not a flag the {kind} runtime allows (catalog.runtimes.{kind}.allowed_runtime_flags: {allowed})"
            )));
        }
    }
    Ok(())
}

/// Checks a package's identifier by its registry's rules; `at` names it in the refusal.
pub fn check_identifier(
    registry_type: &str,
    identifier: &str,
    at: &str,
) -> Result<(), InvalidInput> {
    let (rule, rules): (&Regex, &str) = match registry_type {
        "npm" => (&NPM, "an npm package name"),
        "pypi" => (&PYPI, "a PyPI project name"),
        "oci" => (&OCI, "an OCI image reference"),
        _ => (
            &OTHER,
            "a package identifier (letters, digits and @ / . _ : + ~ = -, not starting with -)",
        ),
    };
    if identifier.len() <= MAX_IDENTIFIER && rule.is_match(identifier) {
        return Ok(());
    }
    Err(InvalidInput::value(format!(
        "{at}.identifier '{}' is not {rules}",
        shown(identifier)
    )))
}

/// Checks a version a runtime's package argument is made with.
pub fn check_version(version: &str, at: &str) -> Result<(), InvalidInput> {
    if version.len() <= MAX_VERSION && VERSION.is_match(version) {
        return Ok(());
    }
    Err(InvalidInput::value(format!(
        "{at}.version '{}' is not a version (letters, digits and . _ + ~ -, starting with a letter or digit)",
        shown(version)
    )))
}

/// A refused value as a refusal quotes it: cut, so a long one does not fill the answer.
fn shown(value: &str) -> String {
    const SHOWN: usize = 80;
    match value.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_registrys_names_are_checked_by_its_rules() {
        for (kind, good) in [
            ("npm", "@modelcontextprotocol/server-filesystem"),
            ("npm", "left-pad"),
            ("npm", "JSONStream"),
            ("pypi", "mcp-server-time"),
            ("pypi", "Django_Rest.framework"),
            ("oci", "ghcr.io/github/github-mcp-server:0.4.0"),
            (
                "oci",
                "localhost:5000/x/y@sha256:0123456789abcdef0123456789abcdef",
            ),
            ("oci", "mcp/fetch"),
            ("nuget", "Knapcode.SampleMcpServer"),
            ("mcpb", "https://github.com/x/y/releases/download/v1/y.mcpb"),
        ] {
            check_identifier(kind, good, "packages[0]")
                .unwrap_or_else(|e| panic!("{kind} {good}: {e}"));
        }
        for (kind, bad) in [
            ("npm", "--call=touch /tmp/x #"),
            ("npm", "-y"),
            ("npm", "left pad"),
            ("npm", ".hidden"),
            ("npm", "a;b"),
            ("pypi", "-e"),
            ("pypi", "mcp-server-"),
            ("pypi", "x==1.0"),
            ("oci", "--privileged"),
            ("oci", "library/Upper"),
            ("nuget", "-x"),
            ("nuget", "a b"),
            ("mcpb", "$(reboot)"),
        ] {
            let refused = check_identifier(kind, bad, "packages[0]").unwrap_err();
            assert!(
                refused.to_string().contains("packages[0].identifier"),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_version_never_starts_with_a_dash_or_holds_a_space() {
        for good in ["1.0.0", "2026.8.31", "1.0.0-beta.1+build.5", "v2", "latest"] {
            check_version(good, "packages[0]").unwrap();
        }
        for bad in ["--call=x", "-1", "1.0 x", "1.0;x", ""] {
            assert!(check_version(bad, "packages[0]").is_err(), "{bad}");
        }
    }
}
