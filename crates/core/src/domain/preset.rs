//! Admin presets: the only way a stdio server's command line comes to exist.
//!
//! A preset fixes the program and an argument template; users fill in the named slots the
//! admin declared (`{root}` in an argument) and the env slots, nothing else. Values are
//! checked against the slot's pattern, and a value that looks like an option (`-x`) is
//! refused unless the admin's pattern explicitly accepts it.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use regex::Regex;
use uuid::Uuid;

use super::SecretMap;
use crate::invalid::InvalidInput;

const MAX_PRESET_NAME: usize = 64;
const MAX_ARGS: usize = 64;
const MAX_SLOTS: usize = 32;
const MAX_TEXT: usize = 4096;

#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub name: String,
    pub description: String,
    pub required: bool,
    pub default: Option<String>,
    /// A regular expression the whole value must match.
    pub pattern: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PresetSpec {
    pub name: String,
    pub description: String,
    pub command: String,
    /// Argument templates; `{slot}` is replaced by the slot's value.
    pub args: Vec<String>,
    pub arg_slots: Vec<Slot>,
    pub env_slots: Vec<Slot>,
    /// Env values fixed by the admin (secret, e.g. a shared API key).
    pub env: SecretMap,
    pub timeout_secs: Option<u32>,
    /// The memory its servers may each use, in MiB, instead of the pool's default
    /// (`pool.stdio_memory_limit_mib`); 0: no limit. A browser needs more than most.
    pub memory_limit_mib: Option<u32>,
    /// Processes and threads its servers may each run, instead of the pool's default
    /// (`pool.stdio_max_tasks_per_server`); 0: no limit.
    pub max_tasks: Option<u32>,
    /// What its servers' sandboxes share with them and let them reach.
    pub sandbox: super::SandboxSpec,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    pub id: Uuid,
    pub spec: PresetSpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A concrete command line, ready for the pool to spawn.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchSpec {
    pub command: String,
    pub args: Vec<String>,
    pub env: SecretMap,
    /// What the admin shares with its sandbox (the preset's, or the catalog runtime's).
    pub sandbox: super::SandboxSpec,
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `{name}` placeholders in one template, in order.
fn placeholders(template: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_identifier(&after[..close]) => {
                found.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    found
}

fn check_text(field: &str, value: &str, max: usize) -> Result<(), InvalidInput> {
    if value.len() > max {
        return Err(InvalidInput::value(format!(
            "{field} is longer than {max} bytes"
        )));
    }
    if value.contains('\0') {
        return Err(InvalidInput::value(format!("{field} must not contain NUL")));
    }
    Ok(())
}

fn compile_pattern(field: &str, pattern: &str) -> Result<Regex, InvalidInput> {
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| InvalidInput::value(format!("{field}.pattern is not a valid regex: {e}")))
}

impl Slot {
    fn validate(&self, field: &str) -> Result<(), InvalidInput> {
        if !is_identifier(&self.name) || self.name.len() > MAX_PRESET_NAME {
            return Err(InvalidInput::value(format!(
                "{field}.name '{}' must be an identifier (letters, digits, _) of at most {MAX_PRESET_NAME} characters",
                self.name
            )));
        }
        check_text(&format!("{field}.description"), &self.description, MAX_TEXT)?;
        if let Some(pattern) = &self.pattern {
            let regex = compile_pattern(field, pattern)?;
            if let Some(default) = &self.default
                && !regex.is_match(default)
            {
                return Err(InvalidInput::value(format!(
                    "{field}.default does not match its own pattern"
                )));
            }
        }
        Ok(())
    }

    /// The value to use: the user's, else the default; errors say which slot and why.
    fn value_for(
        &self,
        kind: &str,
        given: Option<&str>,
        max_bytes: usize,
    ) -> Result<String, InvalidInput> {
        let value = match (given, &self.default) {
            (Some(v), _) => v.to_owned(),
            (None, Some(default)) => default.clone(),
            (None, None) if self.required => {
                return Err(InvalidInput::value(format!(
                    "{kind} '{}' is required by the preset",
                    self.name
                )));
            }
            (None, None) => String::new(),
        };
        check_text(&format!("{kind} '{}'", self.name), &value, max_bytes)?;
        // Defaults were checked against the pattern when the preset was saved.
        if let Some(pattern) = &self.pattern {
            if given.is_some() && !compile_pattern(kind, pattern)?.is_match(&value) {
                return Err(InvalidInput::value(format!(
                    "{kind} '{}' does not match the pattern {pattern}",
                    self.name
                )));
            }
        } else if value.starts_with('-') {
            return Err(InvalidInput::value(format!(
                "{kind} '{}' must not start with '-'",
                self.name
            )));
        }
        Ok(value)
    }
}

impl PresetSpec {
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= MAX_PRESET_NAME
            && self
                .name
                .starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !name_ok {
            return Err(InvalidInput::value(format!(
                "name '{}' must be 1 to {MAX_PRESET_NAME} of a-z, 0-9, - and _",
                self.name
            )));
        }
        check_text("description", &self.description, MAX_TEXT)?;
        self.sandbox.validate()?;
        if self.command.trim().is_empty() {
            return Err(InvalidInput::value("command must not be empty"));
        }
        check_text("command", &self.command, MAX_TEXT)?;
        if self.args.len() > MAX_ARGS {
            return Err(InvalidInput::value(format!("at most {MAX_ARGS} args")));
        }
        for (i, arg) in self.args.iter().enumerate() {
            check_text(&format!("args[{i}]"), arg, MAX_TEXT)?;
        }
        for (field, slots) in [("argSlots", &self.arg_slots), ("envSlots", &self.env_slots)] {
            if slots.len() > MAX_SLOTS {
                return Err(InvalidInput::value(format!("at most {MAX_SLOTS} {field}")));
            }
            let mut seen = BTreeSet::new();
            for (i, slot) in slots.iter().enumerate() {
                slot.validate(&format!("{field}[{i}]"))?;
                if !seen.insert(slot.name.as_str()) {
                    return Err(InvalidInput::value(format!(
                        "{field} declares '{}' twice",
                        slot.name
                    )));
                }
            }
        }
        let declared: BTreeSet<&str> = self.arg_slots.iter().map(|s| s.name.as_str()).collect();
        for arg in &self.args {
            if let Some(unknown) = placeholders(arg)
                .into_iter()
                .find(|p| !declared.contains(p))
            {
                return Err(InvalidInput::value(format!(
                    "args use {{{unknown}}} but argSlots does not declare it"
                )));
            }
        }
        for name in self.env.keys() {
            if !is_identifier(name) {
                return Err(InvalidInput::value(format!(
                    "env name '{name}' is not a valid variable name"
                )));
            }
            if self.env_slots.iter().any(|s| s.name == name) {
                return Err(InvalidInput::value(format!(
                    "env '{name}' is both fixed and a user slot"
                )));
            }
        }
        Ok(())
    }

    /// Builds the command line from the user's slot values, refusing anything the preset
    /// did not declare.
    pub fn resolve(
        &self,
        arg_values: &BTreeMap<String, String>,
        env_values: &SecretMap,
        max_value_bytes: usize,
    ) -> Result<LaunchSpec, InvalidInput> {
        if let Some(unknown) = arg_values
            .keys()
            .find(|k| !self.arg_slots.iter().any(|s| &s.name == *k))
        {
            return Err(InvalidInput::value(format!(
                "presetArgs '{unknown}' is not a slot of preset '{}'",
                self.name
            )));
        }
        if let Some(unknown) = env_values
            .keys()
            .find(|k| !self.env_slots.iter().any(|s| s.name == *k))
        {
            return Err(InvalidInput::value(format!(
                "env '{unknown}' is not an env slot of preset '{}'",
                self.name
            )));
        }
        let mut slot_values = BTreeMap::new();
        for slot in &self.arg_slots {
            let given = arg_values.get(&slot.name).map(String::as_str);
            slot_values.insert(
                slot.name.as_str(),
                slot.value_for("presetArgs", given, max_value_bytes)?,
            );
        }
        let mut args = Vec::with_capacity(self.args.len());
        for template in &self.args {
            let names = placeholders(template);
            if names.len() == 1 && template == &format!("{{{}}}", names[0]) {
                // A whole-argument slot left empty is dropped rather than passed as "".
                let value = &slot_values[names[0]];
                if !value.is_empty() {
                    args.push(value.clone());
                }
                continue;
            }
            let mut arg = template.clone();
            for name in names {
                arg = arg.replace(&format!("{{{name}}}"), &slot_values[name]);
            }
            args.push(arg);
        }
        let mut env = self.env.expose().clone();
        for slot in &self.env_slots {
            let value = slot.value_for("env", env_values.get(&slot.name), max_value_bytes)?;
            if !value.is_empty() {
                env.insert(slot.name.clone(), value);
            }
        }
        Ok(LaunchSpec {
            command: self.command.clone(),
            args,
            env: SecretMap::new(env),
            sandbox: self.sandbox.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, required: bool, pattern: Option<&str>) -> Slot {
        Slot {
            name: name.into(),
            description: String::new(),
            required,
            default: None,
            pattern: pattern.map(Into::into),
        }
    }

    fn filesystem() -> PresetSpec {
        PresetSpec {
            name: "filesystem".into(),
            description: "files".into(),
            command: "npx".into(),
            args: vec![
                "-y".into(),
                "server-filesystem".into(),
                "--root={root}".into(),
                "{extra}".into(),
            ],
            arg_slots: vec![
                slot("root", true, Some("/srv/[a-z]+")),
                slot("extra", false, None),
            ],
            env_slots: vec![slot("TOKEN", false, None)],
            env: SecretMap::new(BTreeMap::from([("FIXED".into(), "1".into())])),
            timeout_secs: None,
            memory_limit_mib: None,
            max_tasks: None,
            sandbox: Default::default(),
        }
    }

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn resolves_templates_drops_empty_whole_slots_and_merges_env() {
        let preset = filesystem();
        preset.validate().unwrap();
        let env = SecretMap::new(values(&[("TOKEN", "t")]));
        let launch = preset
            .resolve(&values(&[("root", "/srv/alice")]), &env, 100)
            .unwrap();
        assert_eq!(
            launch.args,
            ["-y", "server-filesystem", "--root=/srv/alice"]
        );
        assert_eq!(
            launch.env.expose(),
            &values(&[("FIXED", "1"), ("TOKEN", "t")])
        );
    }

    #[test]
    fn refuses_missing_required_unknown_slots_pattern_misses_and_option_injection() {
        let preset = filesystem();
        let none = SecretMap::default();
        assert!(preset.resolve(&values(&[]), &none, 100).is_err());
        assert!(
            preset
                .resolve(&values(&[("root", "/etc")]), &none, 100)
                .is_err()
        );
        assert!(
            preset
                .resolve(&values(&[("root", "/srv/a"), ("nope", "x")]), &none, 100)
                .is_err()
        );
        let err = preset
            .resolve(
                &values(&[("root", "/srv/a"), ("extra", "--allow-all")]),
                &none,
                100,
            )
            .unwrap_err();
        assert!(err.to_string().contains("must not start with '-'"), "{err}");
        let undeclared_env = SecretMap::new(values(&[("LD_PRELOAD", "/x.so")]));
        assert!(
            preset
                .resolve(&values(&[("root", "/srv/a")]), &undeclared_env, 100)
                .is_err()
        );
    }

    #[test]
    fn validation_catches_undeclared_placeholders_and_bad_patterns() {
        let mut preset = filesystem();
        preset.args.push("{missing}".into());
        assert!(preset.validate().is_err());
        let mut preset = filesystem();
        preset.arg_slots[0].pattern = Some("(".into());
        assert!(preset.validate().is_err());
        let mut preset = filesystem();
        preset.name = "Bad Name".into();
        assert!(preset.validate().is_err());
    }
}
