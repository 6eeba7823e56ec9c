//! The server catalog: servers described in the MCP Registry's `server.json` format, which
//! the operator imports and enables, and from which a user makes a server by filling in the
//! entry's inputs.
//!
//! An entry runs one of two ways. A package (npm, PyPI, OCI…) becomes a stdio command line
//! through the runtime the operator configured for its registry type (`npx --offline`,
//! `uvx --offline`, …): nothing is downloaded by the pool. A remote becomes a streamable
//! HTTP or SSE server at the entry's URL. The user fills in only what the entry leaves open
//! (inputs without a `value`, and the `{variables}` of those with one), and every value is
//! checked against what the entry declares (required, choices, format) and the operator's
//! pattern; an argument value that looks like an option (`-x`) is refused unless the
//! operator's pattern accepts it, as for presets.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use regex::Regex;
use serde::Deserialize;
use url::Url;

use super::{LaunchSpec, SecretMap};
use crate::invalid::InvalidInput;

mod package_name;
mod url_template;

/// The `server.json` schema the catalog validates against (the Registry's, pinned).
pub const SERVER_JSON_SCHEMA_VERSION: &str = "2025-12-11";

const MAX_FIELDS: usize = 64;

/// What the operator decided about one entry, and a summary of its latest version.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogEntry {
    pub name: String,
    pub enabled: bool,
    pub latest_version: String,
    /// The version every user's server runs unless the user pinned their own.
    pub pinned_version: Option<String>,
    /// Values the operator sets for everyone; users cannot see or change them.
    pub fixed: SecretMap,
    /// Field name → regular expression a user's value must match (whole value).
    pub patterns: BTreeMap<String, String>,
    pub title: String,
    pub description: String,
    pub kind: EntryKind,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl CatalogEntry {
    /// The version a server runs: the user's pin, else the operator's, else the latest.
    pub fn effective_version<'a>(&'a self, user_pin: Option<&'a str>) -> &'a str {
        user_pin
            .or(self.pinned_version.as_deref())
            .unwrap_or(&self.latest_version)
    }
}

/// One imported version of an entry: its `server.json`, as imported.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogVersion {
    pub name: String,
    pub version: String,
    pub document: serde_json::Value,
    pub imported_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Runs as a local stdio process from a package.
    Package,
    /// A server somewhere else, over streamable HTTP or SSE.
    Remote,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Package => "package",
            EntryKind::Remote => "remote",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        match raw {
            "package" => Ok(EntryKind::Package),
            "remote" => Ok(EntryKind::Remote),
            other => Err(InvalidInput::value(format!(
                "entry kind '{other}' is not package or remote"
            ))),
        }
    }
}

/// How the operator runs packages of one registry type, without downloading at run time.
#[derive(Debug, Clone, PartialEq)]
pub struct PackageRuntime {
    pub command: String,
    /// Before the entry's own runtime arguments (e.g. `--offline`, `--yes`).
    pub args: Vec<String>,
    /// The package as the runtime names it: `{identifier}` and `{version}` replaced.
    pub package: String,
    /// Set for every server of this runtime (e.g. where the offline cache is).
    pub env: BTreeMap<String, String>,
    /// The host paths its servers' sandboxes share (its cache).
    pub sandbox: super::SandboxSpec,
    /// The entries' runtime arguments it takes (`--node-options`); any other is refused.
    pub allowed_runtime_flags: Vec<String>,
    /// `--` goes before the package, so nothing after it is read as the runtime's option.
    pub end_of_options: bool,
}

/// The parts of `server.json` the pool uses; the rest is kept in the stored document.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJson {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    pub description: String,
    pub version: String,
    #[serde(default)]
    pub packages: Vec<Package>,
    #[serde(default)]
    pub remotes: Vec<Remote>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub is_required: bool,
    #[serde(default)]
    pub is_secret: bool,
    #[serde(default)]
    pub default: Option<String>,
    #[serde(default)]
    pub choices: Vec<String>,
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default)]
    pub placeholder: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub variables: BTreeMap<String, Input>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyValueInput {
    pub name: String,
    #[serde(flatten)]
    pub input: Input,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Argument {
    #[serde(rename_all = "camelCase")]
    Positional {
        #[serde(default)]
        value_hint: Option<String>,
        #[serde(flatten)]
        input: Input,
    },
    #[serde(rename_all = "camelCase")]
    Named {
        name: String,
        #[serde(flatten)]
        input: Input,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    pub registry_type: String,
    pub identifier: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub runtime_arguments: Vec<Argument>,
    #[serde(default)]
    pub package_arguments: Vec<Argument>,
    #[serde(default)]
    pub environment_variables: Vec<KeyValueInput>,
    pub transport: PackageTransport,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PackageTransport {
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remote {
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
    #[serde(default)]
    pub headers: Vec<KeyValueInput>,
    #[serde(default)]
    pub variables: BTreeMap<String, Input>,
}

/// What a user fills in to use an entry.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Field {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub required: bool,
    /// Sealed at rest and shown masked, like headers.
    pub secret: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// `string`, `number`, `boolean` or `filepath`.
    pub format: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    /// The operator's pattern the whole value must match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Where the value goes: `argument`, `env`, `header` or `url`.
    pub target: &'static str,
}

/// What an entry resolves to for one user's values.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Stdio(LaunchSpec),
    Remote {
        sse: bool,
        url: Url,
        headers: SecretMap,
    },
}

/// Which of an entry's ways to run the pool uses: the first package with a stdio transport
/// and a configured runtime, else the first remote.
pub enum Runnable<'a> {
    Package(&'a Package, &'a PackageRuntime),
    Remote(&'a Remote),
}

impl ServerJson {
    pub fn parse(document: &serde_json::Value) -> Result<Self, InvalidInput> {
        serde_json::from_value(document.clone())
            .map_err(|e| InvalidInput::value(format!("server.json is not usable: {e}")))
    }

    pub fn runnable<'a>(
        &'a self,
        runtimes: &'a BTreeMap<String, PackageRuntime>,
    ) -> Result<Runnable<'a>, InvalidInput> {
        let package = self.packages.iter().find_map(|p| {
            (p.transport.kind == "stdio")
                .then(|| runtimes.get(&p.registry_type).map(|r| (p, r)))
                .flatten()
        });
        if let Some((package, runtime)) = package {
            return Ok(Runnable::Package(package, runtime));
        }
        if let Some(remote) = self
            .remotes
            .iter()
            .find(|r| r.kind == "streamable-http" || r.kind == "sse")
        {
            return Ok(Runnable::Remote(remote));
        }
        let offered: BTreeSet<&str> = self
            .packages
            .iter()
            .map(|p| p.registry_type.as_str())
            .collect();
        let configured: Vec<&str> = runtimes.keys().map(String::as_str).collect();
        Err(InvalidInput::value(format!(
            "'{}' has no remote and no stdio package of a configured runtime (it offers {}; runtimes configured: {})",
            self.name,
            if offered.is_empty() {
                "no packages".to_owned()
            } else {
                offered.into_iter().collect::<Vec<_>>().join(", ")
            },
            if configured.is_empty() {
                "none".to_owned()
            } else {
                configured.join(", ")
            }
        )))
    }

    /// The inputs a user fills in, minus those the operator fixed.
    pub fn fields(
        &self,
        runtimes: &BTreeMap<String, PackageRuntime>,
        entry: &CatalogEntry,
    ) -> Result<Vec<Field>, InvalidInput> {
        let mut fields = Vec::new();
        match self.runnable(runtimes)? {
            Runnable::Package(package, _) => {
                for argument in package
                    .runtime_arguments
                    .iter()
                    .chain(&package.package_arguments)
                {
                    match argument {
                        Argument::Positional { value_hint, input } => {
                            let name = value_hint.as_deref().unwrap_or("argument");
                            collect(&mut fields, name, input, "argument");
                        }
                        Argument::Named { name, input } => {
                            collect(&mut fields, flag_field(name), input, "argument");
                        }
                    }
                }
                for variable in &package.environment_variables {
                    collect(&mut fields, &variable.name, &variable.input, "env");
                }
            }
            Runnable::Remote(remote) => {
                for (name, input) in &remote.variables {
                    collect(&mut fields, name, input, "url");
                }
                for header in &remote.headers {
                    collect(&mut fields, &header.name, &header.input, "header");
                }
            }
        }
        fields.retain(|f| entry.fixed.get(&f.name).is_none());
        for field in &mut fields {
            field.pattern = entry.patterns.get(&field.name).cloned();
        }
        if fields.len() > MAX_FIELDS {
            return Err(InvalidInput::value(format!(
                "'{}' declares more than {MAX_FIELDS} inputs",
                self.name
            )));
        }
        Ok(fields)
    }

    /// The command line or endpoint for a user's values (secret and not, by field name).
    pub fn resolve(
        &self,
        runtimes: &BTreeMap<String, PackageRuntime>,
        entry: &CatalogEntry,
        values: &BTreeMap<String, String>,
        max_value_bytes: usize,
    ) -> Result<Resolved, InvalidInput> {
        let fields = self.fields(runtimes, entry)?;
        // A value the operator has since fixed is the operator's now: the user's is unused.
        let values: BTreeMap<String, String> = values
            .iter()
            .filter(|(name, _)| entry.fixed.get(name).is_none())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let values = &values;
        if let Some(unknown) = values
            .keys()
            .find(|k| !fields.iter().any(|f| &f.name == *k))
        {
            let offered: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
            return Err(InvalidInput::value(format!(
                "values.{unknown} is not an input of '{}' (its inputs: {})",
                self.name,
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            )));
        }
        let mut chosen: BTreeMap<&str, String> = BTreeMap::new();
        for field in &fields {
            if let Some(value) = field.checked(values.get(&field.name), max_value_bytes)? {
                chosen.insert(field.name.as_str(), value);
            }
        }
        for (name, value) in entry.fixed.expose() {
            chosen.insert(name.as_str(), value.clone());
        }
        let values = Values(chosen);
        match self.runnable(runtimes)? {
            Runnable::Package(package, runtime) => {
                let at = package_name::position(&self.packages, package);
                package_name::check_package(package, &self.version, Some(runtime), &at)?;
                let version = package.version.as_deref().unwrap_or(&self.version);
                let mut args = runtime.args.clone();
                values.arguments(&package.runtime_arguments, &mut args);
                if runtime.end_of_options {
                    args.push("--".to_owned());
                }
                args.push(
                    runtime
                        .package
                        .replace("{identifier}", &package.identifier)
                        .replace("{version}", version),
                );
                values.arguments(&package.package_arguments, &mut args);
                let mut env = runtime.env.clone();
                for variable in &package.environment_variables {
                    if let Some(value) = values.of(&variable.name, &variable.input) {
                        env.insert(variable.name.clone(), value);
                    }
                }
                Ok(Resolved::Stdio(LaunchSpec {
                    command: runtime.command.clone(),
                    args,
                    env: SecretMap::new(env),
                    sandbox: runtime.sandbox.clone(),
                }))
            }
            Runnable::Remote(remote) => {
                let url = url_template::fill(&remote.url, &values.0).map_err(|e| {
                    let mut named: Vec<&str> =
                        remote.variables.keys().map(String::as_str).collect();
                    named.retain(|name| remote.url.contains(&format!("{{{name}}}")));
                    InvalidInput::value(format!(
                        "the URL of '{}' is not valid with the values of {}: {e}",
                        self.name,
                        named.join(", ")
                    ))
                })?;
                let mut headers = BTreeMap::new();
                for header in &remote.headers {
                    if let Some(value) = values.of(&header.name, &header.input) {
                        headers.insert(header.name.clone(), value);
                    }
                }
                Ok(Resolved::Remote {
                    sse: remote.kind == "sse",
                    url,
                    headers: SecretMap::new(headers),
                })
            }
        }
    }
}

/// `--read-only` → `read_only`: a named argument's field name.
fn flag_field(flag: &str) -> &str {
    flag.trim_start_matches('-')
}

/// The fields one input contributes: itself when it has no value, else its variables.
fn collect(fields: &mut Vec<Field>, name: &str, input: &Input, target: &'static str) {
    let mut add = |name: &str, input: &Input| {
        if !fields.iter().any(|f| f.name == name) {
            fields.push(Field {
                name: name.to_owned(),
                description: input.description.clone(),
                required: input.is_required,
                secret: input.is_secret,
                default: input.default.clone(),
                choices: input.choices.clone(),
                format: input.format.clone().unwrap_or_else(|| "string".into()),
                placeholder: input.placeholder.clone(),
                pattern: None,
                target,
            });
        }
    };
    match &input.value {
        None => add(name, input),
        Some(_) => {
            for (variable, input) in &input.variables {
                add(variable, input);
            }
        }
    }
}

impl Field {
    /// The value to use, checked: the user's, else the default; `None` when neither.
    fn checked(
        &self,
        given: Option<&String>,
        max_value_bytes: usize,
    ) -> Result<Option<String>, InvalidInput> {
        let value = match (given, &self.default) {
            (Some(value), _) => value.clone(),
            (None, Some(default)) => return Ok(Some(default.clone())),
            (None, None) if self.required => {
                return Err(InvalidInput::value(format!(
                    "values.{} is required{}",
                    self.name,
                    self.description
                        .as_deref()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default()
                )));
            }
            (None, None) => return Ok(None),
        };
        let field = format!("values.{}", self.name);
        if value.len() > max_value_bytes {
            return Err(InvalidInput::value(format!(
                "{field} is longer than {max_value_bytes} bytes"
            )));
        }
        if value.contains('\0') || value.contains('\n') {
            return Err(InvalidInput::value(format!(
                "{field} must not contain NUL or a line break"
            )));
        }
        if !self.choices.is_empty() && !self.choices.contains(&value) {
            return Err(InvalidInput::value(format!(
                "{field} must be one of {}",
                self.choices.join(", ")
            )));
        }
        match self.format.as_str() {
            "number" if !value.parse::<f64>().is_ok_and(f64::is_finite) => {
                return Err(InvalidInput::value(format!("{field} must be a number")));
            }
            "boolean" if value != "true" && value != "false" => {
                return Err(InvalidInput::value(format!(
                    "{field} must be true or false"
                )));
            }
            _ => {}
        }
        let refused = match &self.pattern {
            Some(pattern) => (!whole_match(pattern)?.is_match(&value))
                .then(|| format!("{field} does not match the pattern {pattern}")),
            None => (self.target == "argument" && value.starts_with('-'))
                .then(|| format!("{field} must not start with '-'")),
        };
        match refused {
            Some(reason) => Err(InvalidInput::value(reason)),
            None => Ok(Some(value)),
        }
    }
}

/// A pattern as the operator wrote it, anchored to the whole value.
pub fn whole_match(pattern: &str) -> Result<Regex, InvalidInput> {
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| InvalidInput::value(format!("pattern {pattern} is not valid: {e}")))
}

/// The checked values by field name.
struct Values<'a>(BTreeMap<&'a str, String>);

impl Values<'_> {
    /// `{name}` replaced by its value; unknown names stay as written (the format's rule).
    fn fill(&self, template: &str) -> String {
        let mut out = template.to_owned();
        for (name, value) in &self.0 {
            out = out.replace(&format!("{{{name}}}"), value);
        }
        out
    }

    /// An input's value: its fixed `value` with variables filled, else the user's.
    fn of(&self, name: &str, input: &Input) -> Option<String> {
        match &input.value {
            Some(template) => Some(self.fill(template)),
            None => self.0.get(name).cloned(),
        }
    }

    fn arguments(&self, arguments: &[Argument], out: &mut Vec<String>) {
        for argument in arguments {
            match argument {
                Argument::Positional { value_hint, input } => {
                    let name = value_hint.as_deref().unwrap_or("argument");
                    if let Some(value) = self.of(name, input) {
                        out.push(value);
                    }
                }
                Argument::Named { name, input } => {
                    // A boolean flag is there or not.
                    let flag = input.format.as_deref() == Some("boolean");
                    match self.of(flag_field(name), input) {
                        Some(value) if flag && value == "true" => out.push(name.clone()),
                        Some(value) if !flag => out.push(format!("{name}={value}")),
                        _ => {}
                    }
                }
            }
        }
    }
}

/// Orders versions: semantic versions by precedence, others after them by text.
pub fn newer_version(a: &str, b: &str) -> bool {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(a), Ok(b)) => a > b,
        (Ok(_), Err(_)) => false,
        (Err(_), Ok(_)) => true,
        (Err(_), Err(_)) => a > b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn runtimes() -> BTreeMap<String, PackageRuntime> {
        BTreeMap::from([(
            "npm".to_owned(),
            PackageRuntime {
                command: "npx".into(),
                args: vec!["--offline".into(), "--yes".into()],
                package: "{identifier}@{version}".into(),
                env: BTreeMap::from([("NPM_CONFIG_CACHE".into(), "/cache".into())]),
                sandbox: Default::default(),
                allowed_runtime_flags: Vec::new(),
                end_of_options: true,
            },
        )])
    }

    fn entry() -> CatalogEntry {
        CatalogEntry {
            name: "io.github.x/fs".into(),
            enabled: true,
            latest_version: "1.0.0".into(),
            pinned_version: None,
            fixed: SecretMap::default(),
            patterns: BTreeMap::new(),
            title: String::new(),
            description: String::new(),
            kind: EntryKind::Package,
            created_at: crate::domain::now(),
            updated_at: crate::domain::now(),
        }
    }

    fn filesystem() -> ServerJson {
        ServerJson::parse(&json!({
            "name": "io.github.x/fs",
            "description": "files",
            "version": "1.0.0",
            "packages": [{
                "registryType": "npm",
                "identifier": "@x/fs",
                "version": "2.0.0",
                "transport": {"type": "stdio"},
                "packageArguments": [
                    {"type": "positional", "valueHint": "root", "isRequired": true},
                    {"type": "named", "name": "--mode", "value": "{mode}",
                     "variables": {"mode": {"choices": ["ro", "rw"], "default": "ro"}}},
                    {"type": "named", "name": "--verbose", "format": "boolean"}
                ],
                "environmentVariables": [
                    {"name": "TOKEN", "isSecret": true},
                    {"name": "FIXED", "value": "1"}
                ]
            }]
        }))
        .unwrap()
    }

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_package_becomes_the_runtime_command_with_the_users_values() {
        let server = filesystem();
        let fields = server.fields(&runtimes(), &entry()).unwrap();
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["root", "mode", "verbose", "TOKEN"]);
        assert!(fields[3].secret);
        let Resolved::Stdio(launch) = server
            .resolve(
                &runtimes(),
                &entry(),
                &values(&[("root", "/srv/a"), ("verbose", "true"), ("TOKEN", "t")]),
                100,
            )
            .unwrap()
        else {
            panic!("a package runs as stdio")
        };
        assert_eq!(launch.command, "npx");
        assert_eq!(
            launch.args,
            [
                "--offline",
                "--yes",
                "--",
                "@x/fs@2.0.0",
                "/srv/a",
                "--mode=ro",
                "--verbose"
            ]
        );
        assert_eq!(
            launch.env.expose(),
            &values(&[
                ("FIXED", "1"),
                ("NPM_CONFIG_CACHE", "/cache"),
                ("TOKEN", "t")
            ])
        );
    }

    #[test]
    fn values_are_checked_against_what_the_entry_declares() {
        let server = filesystem();
        let resolve = |pairs: &[(&str, &str)]| {
            server
                .resolve(&runtimes(), &entry(), &values(pairs), 100)
                .unwrap_err()
                .to_string()
        };
        assert!(resolve(&[]).contains("values.root is required"));
        assert!(resolve(&[("root", "/a"), ("mode", "x")]).contains("one of ro, rw"));
        assert!(resolve(&[("root", "--exec=x")]).contains("must not start with '-'"));
        assert!(resolve(&[("root", "/a"), ("verbose", "yes")]).contains("true or false"));
        assert!(resolve(&[("root", "/a"), ("LD_PRELOAD", "x")]).contains("not an input"));
        let mut strict = entry();
        strict.patterns.insert("root".into(), "/srv/[a-z]+".into());
        let err = server
            .resolve(&runtimes(), &strict, &values(&[("root", "/etc")]), 100)
            .unwrap_err();
        assert!(err.to_string().contains("pattern"), "{err}");
    }

    #[test]
    fn a_value_the_operator_fixed_is_no_field_and_wins() {
        let server = filesystem();
        let mut fixed = entry();
        fixed.fixed = SecretMap::new(values(&[("TOKEN", "operator")]));
        let fields = server.fields(&runtimes(), &fixed).unwrap();
        assert!(fields.iter().all(|f| f.name != "TOKEN"));
        let Resolved::Stdio(launch) = server
            .resolve(&runtimes(), &fixed, &values(&[("root", "/a")]), 100)
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(launch.env.get("TOKEN"), Some("operator"));
    }

    #[test]
    fn a_remote_fills_its_url_and_headers() {
        let server = ServerJson::parse(&json!({
            "name": "io.github.x/remote",
            "description": "r",
            "version": "1",
            "packages": [{"registryType": "oci", "identifier": "x/y:1", "transport": {"type": "stdio"}}],
            "remotes": [{
                "type": "streamable-http",
                "url": "https://{tenant}.example.com/mcp",
                "variables": {"tenant": {"isRequired": true}},
                "headers": [{"name": "Authorization", "value": "Bearer {key}",
                             "variables": {"key": {"isSecret": true, "isRequired": true}}}]
            }]
        }))
        .unwrap();
        let Resolved::Remote { sse, url, headers } = server
            .resolve(
                &runtimes(),
                &entry(),
                &values(&[("tenant", "acme"), ("key", "k")]),
                100,
            )
            .unwrap()
        else {
            panic!("no npm package: the remote is used")
        };
        assert!(!sse);
        assert_eq!(url.as_str(), "https://acme.example.com/mcp");
        assert_eq!(headers.get("Authorization"), Some("Bearer k"));
    }

    #[test]
    fn an_entry_with_nothing_runnable_says_what_it_offers() {
        let server = ServerJson::parse(&json!({
            "name": "io.github.x/nuget", "description": "n", "version": "1",
            "packages": [{"registryType": "nuget", "identifier": "X", "transport": {"type": "stdio"}}]
        }))
        .unwrap();
        let err = server
            .fields(&runtimes(), &entry())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("offers nuget") && err.contains("configured: npm"),
            "{err}"
        );
    }

    #[test]
    fn versions_order_by_semver_then_text() {
        assert!(newer_version("1.10.0", "1.9.0"));
        assert!(!newer_version("1.0.0-beta", "1.0.0"));
        assert!(newer_version("2025.9.1", "2025.8.31"));
    }
}
