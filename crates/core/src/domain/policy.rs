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
}

impl PolicyAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyAction::Allow => "allow",
            PolicyAction::Deny => "deny",
            PolicyAction::RequireApproval => "require_approval",
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
    /// Evaluated and counted, never enforced: what the rule would refuse is logged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

fn call_scope() -> RuleScope {
    RuleScope::Call
}

/// The rules in force: ordered, the first that applies decides; none applying allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySet {
    /// Increases by one with every change; 0 is the empty set nobody saved.
    pub version: i64,
    pub rules: Vec<PolicyRule>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The admin key that saved it.
    pub updated_by: Option<String>,
}

impl PolicySet {
    pub fn empty() -> Self {
        Self {
            version: 0,
            rules: Vec::new(),
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
            dry_run: false,
        };
        assert!(PolicySet::check_rules(&[rule("a", "true"), rule("b", "false")]).is_ok());
        assert!(PolicySet::check_rules(&[rule("a", "true"), rule("a", "false")]).is_err());
        assert!(PolicySet::check_rules(&[rule("a", " ")]).is_err());
    }
}
