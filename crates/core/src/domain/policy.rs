//! The operator's governance: who a user is (groups and a plan the backend sets, never the
//! end user), and ordered rules over every tool call and every server a user saves.
//!
//! A rule's condition is a CEL expression (compiled and evaluated in the services layer);
//! here are only the validated shapes, so that the store and the API share them.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use crate::invalid::InvalidInput;

const MAX_GROUPS: usize = 64;
const MAX_LABEL: usize = 64;
/// Rules in one set: evaluation stays within its budget (50 rules ≤ 5 µs per call).
pub const MAX_RULES: usize = 200;
const MAX_CONDITION: usize = 4096;

/// What the backend says about a user: the groups they are in and their plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserAttributes {
    pub groups: Vec<String>,
    pub plan: Option<String>,
}

/// A group or plan name: 1 to 64 of letters, digits, `-`, `_`, `.`, `:`.
fn check_label(field: &str, value: &str) -> Result<(), InvalidInput> {
    let ok = !value.is_empty()
        && value.len() <= MAX_LABEL
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if ok {
        Ok(())
    } else {
        Err(InvalidInput::value(format!(
            "{field} '{value}' must be 1 to {MAX_LABEL} of letters, digits, -, _, . and :"
        )))
    }
}

/// A group's name as users' attributes hold it (a team's name).
pub fn check_group(group: &str) -> Result<(), InvalidInput> {
    check_label("group", group)
}

impl UserAttributes {
    /// Checked, groups sorted and without repeats.
    pub fn new(groups: Vec<String>, plan: Option<String>) -> Result<Self, InvalidInput> {
        if groups.len() > MAX_GROUPS {
            return Err(InvalidInput::value(format!(
                "a user may be in at most {MAX_GROUPS} groups"
            )));
        }
        for group in &groups {
            check_label("group", group)?;
        }
        if let Some(plan) = &plan {
            check_label("plan", plan)?;
        }
        let groups: BTreeSet<String> = groups.into_iter().collect();
        Ok(Self {
            groups: groups.into_iter().collect(),
            plan,
        })
    }
}

/// What a rule is about.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum RuleScope {
    /// Every tool call, on every path, before it runs (and the tools offered to a model).
    Call,
    /// A server a user creates or changes.
    Server,
}

/// What a matching rule decides.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PolicyAction {
    /// Stops evaluation: the call (or server) is allowed.
    Allow,
    /// Refused, naming the rule.
    Deny,
    /// The call waits for its user's approval even when the user auto-approves the tool;
    /// where a call cannot wait (a direct REST or gRPC call), it is refused.
    RequireApproval,
    /// The rule's `fields` are kept out of the audit log and logs; evaluation goes on
    /// (every applying `redact` rule adds its fields; the call itself is unchanged).
    Redact,
}

impl PolicyAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyAction::Allow => "allow",
            PolicyAction::Deny => "deny",
            PolicyAction::RequireApproval => "require_approval",
            PolicyAction::Redact => "redact",
        }
    }
}

/// One rule as the operator wrote it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyRule {
    /// Unique in the set; named in refusals, logs and metrics.
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default = "call_scope")]
    pub on: RuleScope,
    /// A CEL expression that is true when the rule applies, over `user`, `server`, `tool`,
    /// `arguments` and `path` (see the README).
    pub when: String,
    pub action: PolicyAction,
    /// For `redact`: what is kept out of the audit log and logs, each `arguments.<path>`
    /// or `result.<path>` with the path's parts joined by `.` (`arguments.password`,
    /// `result.structuredContent.token`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// Evaluated and counted, never enforced: what the rule would refuse is logged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

fn call_scope() -> RuleScope {
    RuleScope::Call
}

/// Fields a `redact` rule names (and only such a rule).
fn check_fields(i: usize, rule: &PolicyRule) -> Result<(), InvalidInput> {
    if rule.action != PolicyAction::Redact {
        if rule.fields.is_empty() {
            return Ok(());
        }
        return Err(InvalidInput::value(format!(
            "rules[{i}].fields is only for a redact rule"
        )));
    }
    if rule.fields.is_empty() || rule.fields.len() > 32 {
        return Err(InvalidInput::value(format!(
            "rules[{i}] redacts: fields must name 1 to 32 fields"
        )));
    }
    for field in &rule.fields {
        let path = field
            .strip_prefix("arguments.")
            .or_else(|| field.strip_prefix("result."));
        let ok = path.is_some_and(|p| p.len() <= 256 && p.split('.').all(|part| !part.is_empty()));
        if !ok {
            return Err(InvalidInput::value(format!(
                "rules[{i}].fields: '{field}' must be arguments.<path> or result.<path>, the path's parts joined by ."
            )));
        }
    }
    Ok(())
}

/// How long a quota's count lasts: fixed windows in UTC (a minute, an hour, a day from
/// midnight), so every instance agrees on which window a call falls in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum QuotaWindow {
    Minute,
    Hour,
    Day,
}

impl QuotaWindow {
    pub fn seconds(self) -> i64 {
        match self {
            QuotaWindow::Minute => 60,
            QuotaWindow::Hour => 3600,
            QuotaWindow::Day => 86_400,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QuotaWindow::Minute => "minute",
            QuotaWindow::Hour => "hour",
            QuotaWindow::Day => "day",
        }
    }

    /// The end of the window holding `at` (seconds since the epoch, UTC).
    pub fn end_after(self, at: i64) -> i64 {
        let length = self.seconds();
        at.div_euclid(length) * length + length
    }
}

/// Whose calls one count holds.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum QuotaSubject {
    /// Each user the quota applies to has their own count.
    User,
    /// One count for everyone it applies to (a team's or a plan's pool).
    Shared,
}

/// What a quota counts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum QuotaMeasure {
    /// Tool calls that run.
    Calls,
    /// Tokens of the sampling requests the service runs for servers (prompt and answer).
    SamplingTokens,
}

/// A limit on tool calls or sampling tokens over a window: "100 calls a day on the free
/// plan".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Quota {
    /// Unique among the quotas; named in refusals and in the use shown per user. Renaming
    /// one starts its counts again.
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// A CEL expression over `user`, `server`, `tool` and `path` (not `arguments`) that is
    /// true for the calls the quota counts; absent: every call. A `samplingTokens` quota's
    /// reads only `user` (and `path`, which is `sampling`).
    #[serde(default = "every_call")]
    pub when: String,
    /// `calls` (the default) or `samplingTokens`.
    #[serde(default = "calls")]
    pub counts: QuotaMeasure,
    /// Calls (or tokens) counted per window.
    pub limit: u64,
    pub window: QuotaWindow,
    /// `user` (the default): a count per user; `shared`: one count for all it applies to.
    #[serde(default = "per_user")]
    pub per: QuotaSubject,
}

fn every_call() -> String {
    "true".into()
}

fn calls() -> QuotaMeasure {
    QuotaMeasure::Calls
}

fn per_user() -> QuotaSubject {
    QuotaSubject::User
}

/// Quotas in one set.
pub const MAX_QUOTAS: usize = 50;
/// The most calls a quota may count in a window.
const MAX_QUOTA_LIMIT: u64 = 1_000_000_000;

/// The rules in force: ordered, the first that applies decides; none applying allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySet {
    /// Increases by one with every change; 0 is the empty set nobody saved.
    pub version: i64,
    pub rules: Vec<PolicyRule>,
    /// Every quota that applies to a call counts it.
    pub quotas: Vec<Quota>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The admin key that saved it.
    pub updated_by: Option<String>,
}

impl PolicySet {
    pub fn empty() -> Self {
        Self {
            version: 0,
            rules: Vec::new(),
            quotas: Vec::new(),
            updated_at: None,
            updated_by: None,
        }
    }

    /// The shape of the rules (names, sizes); their conditions are compiled above.
    pub fn check_rules(rules: &[PolicyRule]) -> Result<(), InvalidInput> {
        if rules.len() > MAX_RULES {
            return Err(InvalidInput::value(format!("at most {MAX_RULES} rules")));
        }
        let mut names = BTreeSet::new();
        for (i, rule) in rules.iter().enumerate() {
            check_label(&format!("rules[{i}].name"), &rule.name)?;
            if !names.insert(rule.name.as_str()) {
                return Err(InvalidInput::value(format!(
                    "rules[{i}].name '{}' is used twice",
                    rule.name
                )));
            }
            if rule.when.trim().is_empty() || rule.when.len() > MAX_CONDITION {
                return Err(InvalidInput::value(format!(
                    "rules[{i}].when must be 1 to {MAX_CONDITION} bytes of CEL"
                )));
            }
            if rule.description.len() > MAX_CONDITION {
                return Err(InvalidInput::value(format!(
                    "rules[{i}].description is longer than {MAX_CONDITION} bytes"
                )));
            }
            check_fields(i, rule)?;
        }
        Ok(())
    }

    /// The shape of the quotas (names, limits); their conditions are compiled above.
    pub fn check_quotas(quotas: &[Quota]) -> Result<(), InvalidInput> {
        if quotas.len() > MAX_QUOTAS {
            return Err(InvalidInput::value(format!("at most {MAX_QUOTAS} quotas")));
        }
        let mut names = BTreeSet::new();
        for (i, quota) in quotas.iter().enumerate() {
            check_label(&format!("quotas[{i}].name"), &quota.name)?;
            if !names.insert(quota.name.as_str()) {
                return Err(InvalidInput::value(format!(
                    "quotas[{i}].name '{}' is used twice",
                    quota.name
                )));
            }
            if quota.when.trim().is_empty() || quota.when.len() > MAX_CONDITION {
                return Err(InvalidInput::value(format!(
                    "quotas[{i}].when must be 1 to {MAX_CONDITION} bytes of CEL"
                )));
            }
            if quota.limit > MAX_QUOTA_LIMIT {
                return Err(InvalidInput::value(format!(
                    "quotas[{i}].limit must be at most {MAX_QUOTA_LIMIT}"
                )));
            }
            if quota.description.len() > MAX_CONDITION {
                return Err(InvalidInput::value(format!(
                    "quotas[{i}].description is longer than {MAX_CONDITION} bytes"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_checked_and_groups_kept_once_in_order() {
        let attributes = UserAttributes::new(
            vec!["support".into(), "eng".into(), "support".into()],
            Some("free".into()),
        )
        .unwrap();
        assert_eq!(attributes.groups, ["eng", "support"]);
        assert!(UserAttributes::new(vec!["a b".into()], None).is_err());
        assert!(UserAttributes::new(Vec::new(), Some(String::new())).is_err());
    }

    #[test]
    fn rule_names_are_unique_and_conditions_present() {
        let rule = |name: &str, when: &str| PolicyRule {
            name: name.into(),
            description: String::new(),
            on: RuleScope::Call,
            when: when.into(),
            action: PolicyAction::Deny,
            fields: Vec::new(),
            dry_run: false,
        };
        assert!(PolicySet::check_rules(&[rule("a", "true"), rule("b", "false")]).is_ok());
        assert!(PolicySet::check_rules(&[rule("a", "true"), rule("a", "false")]).is_err());
        assert!(PolicySet::check_rules(&[rule("a", " ")]).is_err());
        let redact = |fields: &[&str]| PolicyRule {
            action: PolicyAction::Redact,
            fields: fields.iter().map(|f| f.to_string()).collect(),
            ..rule("r", "true")
        };
        assert!(PolicySet::check_rules(&[redact(&["arguments.password"])]).is_ok());
        assert!(PolicySet::check_rules(&[redact(&["result.a.b"])]).is_ok());
        assert!(PolicySet::check_rules(&[redact(&[])]).is_err());
        assert!(PolicySet::check_rules(&[redact(&["password"])]).is_err());
        assert!(PolicySet::check_rules(&[redact(&["arguments..x"])]).is_err());
    }

    #[test]
    fn quota_windows_end_on_their_boundaries_in_utc() {
        assert_eq!(QuotaWindow::Minute.end_after(0), 60);
        assert_eq!(QuotaWindow::Minute.end_after(59), 60);
        assert_eq!(QuotaWindow::Minute.end_after(60), 120);
        assert_eq!(QuotaWindow::Day.end_after(86_399), 86_400);
        assert_eq!(QuotaWindow::Hour.end_after(-1), 0);
    }
}
