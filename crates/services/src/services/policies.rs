//! The operator's rules over tool calls and servers, in CEL (the `cel` crate, as
//! agentgateway uses), and the user attributes they read.
//!
//! Rules are compiled once per saved set and swapped in whole; every instance reads the
//! set's version each second and recompiles when it moved, so a change applies everywhere
//! within a second without any message between instances. A call is decided by the first
//! rule whose condition is true (a `dryRun` rule is counted and logged, never decides);
//! none applying allows. A condition that cannot be evaluated for a call (a field the call
//! does not have) does not apply; its error is counted. `redact` rules do not decide: each
//! that applies adds its fields to what the audit log leaves out, and evaluation goes on.
//!
//! Quotas are saved with the rules. Every quota whose condition is true for an allowed
//! call counts it, in the database (one conditional increment per quota), so instances
//! sharing it count against the same number exactly; a call that would pass a limit is
//! refused (429 `QUOTA_EXCEEDED`) with the time left in the window.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

type JsonObject = Map<String, Value>;

use crate::domain::{
    CallVia, McpServer, PolicyAction, PolicyRule, PolicySet, Quota, QuotaMeasure, QuotaSubject,
    RuleScope, UserAttributes, UserId,
};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::store::Store;

mod cost;

use cost::{
    Cost, MAX_STEPS, SAVED_AT_LENGTH, off_reactor, over_budget, too_costly, unevaluated_applies,
    with_reason,
};

/// What a whole set's conditions may cost a call together, at the lengths they are saved at.
const MAX_SET_STEPS: u64 = 4 * MAX_STEPS;

/// How long a user's attributes are read from memory before the database again: a change
/// made on another instance applies within this.
const ATTRIBUTES_TTL: Duration = Duration::from_secs(1);
/// How often the rules' version is read from the database.
const RELOAD_EVERY: Duration = Duration::from_secs(1);
/// How often counts of windows that ended a day ago are deleted (in reloads).
const SWEEP_EVERY_RELOADS: u64 = 600;

/// What a rule decided, and which rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `allow`, `deny` or `require_approval`.
    pub action: &'static str,
    /// The rule that decided; none when no rule applied (allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// `dryRun` rules that would have decided otherwise, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<String>,
    /// What applying `redact` rules keep out of the audit log (`arguments.…`, `result.…`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
    /// The quotas that count the call when it runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<String>,
    /// Why the rule decided without its condition being evaluated (it would have cost
    /// too much on these arguments); the refusal says this instead of its description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Decision {
    fn allow() -> Self {
        Self {
            action: PolicyAction::Allow.as_str(),
            rule: None,
            dry_run: Vec::new(),
            redact: Vec::new(),
            quotas: Vec::new(),
            reason: None,
        }
    }

    pub fn is_denied(&self) -> bool {
        self.action == PolicyAction::Deny.as_str()
    }

    pub fn requires_approval(&self) -> bool {
        self.action == PolicyAction::RequireApproval.as_str()
    }

    /// The refusal a caller reads: the rule's name and description.
    pub fn refusal(&self, policies: &Policies) -> Option<Error> {
        let rule = self.rule.clone()?;
        let description = self
            .reason
            .clone()
            .unwrap_or_else(|| policies.description(&rule));
        if self.is_denied() {
            Some(Error::PolicyDenied { rule, description })
        } else if self.requires_approval() {
            Some(Error::PolicyApprovalRequired { rule, description })
        } else {
            None
        }
    }
}

/// What a tool call is, as rules see it.
pub struct CallFacts<'a> {
    pub user: &'a UserId,
    pub attributes: &'a UserAttributes,
    pub server: &'a McpServer,
    pub tool: &'a rmcp::model::Tool,
    /// `None` where the call is not made yet (the tools offered to a model).
    pub arguments: Option<&'a Value>,
    pub via: CallVia,
}

struct RuleSetRule {
    rule: PolicyRule,
    program: cel::Program,
    /// Reads `arguments`: evaluated for each call; the others once per call base.
    uses_arguments: bool,
    /// The argument keys it reads, when it reads `arguments` only as `arguments.<key>`
    /// (`has(arguments.<key>)` included): a call holding none of them is decided as a call
    /// with no arguments, which its base evaluates once.
    argument_keys: Option<Vec<String>>,
    /// What evaluating its condition costs, by the lengths of the lists it is given.
    cost: Cost,
}

struct CompiledQuota {
    quota: Quota,
    program: cel::Program,
}

/// A set of rules compiled, ready to decide: what [`Policies`] swaps in whole.
pub struct RuleSet {
    set: PolicySet,
    calls: Vec<RuleSetRule>,
    servers: Vec<RuleSetRule>,
    /// Quotas on calls.
    quotas: Vec<CompiledQuota>,
    /// Quotas on sampling tokens.
    token_quotas: Vec<CompiledQuota>,
    env: Arc<cel::Env>,
    /// Some call rule reads the arguments.
    reads_arguments: bool,
    /// Some call rule that reads the arguments iterates what they hold: its cost is
    /// reckoned for each call's lists.
    grows_with_arguments: bool,
    /// What a call's base costs to build (its rules that do not read the arguments, and
    /// the quotas), at the lengths rules are saved at.
    base_steps: u64,
    /// What a call costs (its base and the rules that read arguments) at those lengths.
    saved_steps: u64,
    /// Call bases by the hash of what they were built from (checked again on a hit).
    bases: moka::sync::Cache<u64, Arc<CallBase>>,
}

/// Call bases kept (a few hundred bytes each) and how long: a user's attributes or a
/// server's definition changing makes a new key; these only bound the memory.
const BASES_KEPT: u64 = 100_000;
const BASE_TTL: Duration = Duration::from_secs(300);

/// What a call's decision depends on besides its arguments, built once per user (with
/// their attributes), server (as last saved), tool and door and kept: the values the
/// rules read, and which rules that do not read the arguments apply. A call then
/// evaluates only the rules that read its arguments.
struct CallBase {
    key: BaseKey,
    /// `user`, `server`, `tool` and `path` bound once: binding converts each value into
    /// the interpreter's own (a deep copy), which cost more than the rules themselves.
    context: cel::Context<'static, 'static>,
    /// By call rule: whether it applies, or `None` when that depends on the arguments. A
    /// rule that reads them is false here when its other parts already make it false
    /// (`tool.name == "x" && arguments…` for another tool): CEL's `&&`, `||` and `?:`
    /// pass over an error only where the other side decides, so a definite result
    /// without the arguments is the result with any.
    applies: Vec<Option<bool>>,
    /// By call rule with known argument keys: whether it applies to a call with none.
    without_arguments: Vec<Option<bool>>,
    /// The names of the quotas that count such a call.
    quotas: Vec<String>,
}

/// Everything a base was built from, compared in full on a cache hit.
#[derive(PartialEq)]
struct BaseKey {
    user: UserId,
    attributes: UserAttributes,
    server: uuid::Uuid,
    server_saved: chrono::DateTime<chrono::Utc>,
    tool: rmcp::model::Tool,
    via: CallVia,
}

impl BaseKey {
    fn matches(&self, facts: &CallFacts<'_>) -> bool {
        self.via == facts.via
            && self.server == facts.server.id
            && self.server_saved == facts.server.updated_at
            && self.user == *facts.user
            && self.attributes == *facts.attributes
            && self.tool.name == facts.tool.name
            && self.tool.title == facts.tool.title
            && self.tool.annotations == facts.tool.annotations
    }

    fn hash_of(facts: &CallFacts<'_>) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        facts.user.as_str().hash(&mut hasher);
        facts.attributes.groups.hash(&mut hasher);
        facts.attributes.plan.hash(&mut hasher);
        facts.server.id.hash(&mut hasher);
        facts.server.updated_at.hash(&mut hasher);
        facts.tool.name.hash(&mut hasher);
        facts.via.as_str().hash(&mut hasher);
        hasher.finish()
    }
}

/// A condition's parse errors, each as `rules[i].when ('name'): line L, column C: …`.
fn where_wrong<'a>(
    list: &'a str,
    i: usize,
    name: &'a str,
    errors: &'a cel::ParseErrors,
) -> impl Iterator<Item = String> + 'a {
    errors.errors.iter().map(move |e| {
        format!(
            "{list}[{i}].when ('{name}'): line {}, column {}: {}",
            e.pos.0, e.pos.1, e.msg
        )
    })
}

/// Whether `program` is true in `context` (an error or another value is not).
fn holds(program: &cel::Program, context: &cel::Context<'_, '_>) -> bool {
    matches!(program.execute(context), Ok(cel::Value::Bool(true)))
}

/// The names of the quotas that count a call in `context`.
fn counting(quotas: &[CompiledQuota], context: &cel::Context<'_, '_>) -> Vec<String> {
    quotas
        .iter()
        .filter(|q| holds(&q.program, context))
        .map(|q| q.quota.name.clone())
        .collect()
}

/// The problems of a set's conditions, as `rules[i].when: line L, column C: …` lines.
fn compile(set: PolicySet) -> std::result::Result<RuleSet, Vec<String>> {
    let mut calls = Vec::new();
    let mut servers = Vec::new();
    let mut problems = Vec::new();
    for (i, rule) in set.rules.iter().enumerate() {
        match cel::Program::compile(&rule.when) {
            Ok(program) => {
                let compiled = RuleSetRule {
                    uses_arguments: program.references().has_variable("arguments"),
                    argument_keys: argument_keys(program.expression()),
                    cost: Cost::of(program.expression()),
                    rule: rule.clone(),
                    program,
                };
                let steps = compiled.cost.at(SAVED_AT_LENGTH);
                if steps > MAX_STEPS {
                    problems.push(over_budget("rules", i, &rule.name, steps));
                }
                match rule.on {
                    RuleScope::Call => calls.push(compiled),
                    RuleScope::Server => servers.push(compiled),
                }
            }
            Err(errors) => problems.extend(where_wrong("rules", i, &rule.name, &errors)),
        }
    }
    let mut quotas = Vec::new();
    let mut token_quotas = Vec::new();
    let mut quota_steps = 0u64;
    for (i, quota) in set.quotas.iter().enumerate() {
        let tokens = quota.counts == QuotaMeasure::SamplingTokens;
        match cel::Program::compile(&quota.when) {
            Ok(program) if program.references().has_variable("arguments") => problems.push(
                format!(
                    "quotas[{i}].when ('{}'): a quota cannot read arguments (it counts calls by who, where and what, not by what they carry)",
                    quota.name
                ),
            ),
            Ok(program)
                if tokens
                    && ["server", "tool"]
                        .iter()
                        .any(|v| program.references().has_variable(v)) =>
            {
                problems.push(format!(
                    "quotas[{i}].when ('{}'): a samplingTokens quota reads only user and path",
                    quota.name
                ))
            }
            Ok(program) => {
                let steps = Cost::of(program.expression()).at(SAVED_AT_LENGTH);
                if steps > MAX_STEPS {
                    problems.push(over_budget("quotas", i, &quota.name, steps));
                }
                quota_steps = quota_steps.saturating_add(steps);
                let compiled = CompiledQuota {
                    quota: quota.clone(),
                    program,
                };
                if tokens {
                    token_quotas.push(compiled);
                } else {
                    quotas.push(compiled);
                }
            }
            Err(errors) => problems.extend(where_wrong("quotas", i, &quota.name, &errors)),
        }
    }
    let at_saved = |rules: &[RuleSetRule], arguments: bool| {
        rules
            .iter()
            .filter(|r| r.uses_arguments == arguments)
            .fold(0u64, |sum, r| {
                sum.saturating_add(r.cost.at(SAVED_AT_LENGTH))
            })
    };
    let base_steps = at_saved(&calls, false).saturating_add(quota_steps);
    let set_steps = base_steps.saturating_add(at_saved(&calls, true));
    if problems.is_empty() && set_steps > MAX_SET_STEPS {
        problems.push(format!(
            "the rules' conditions together would take about {set_steps} steps a call on lists of {SAVED_AT_LENGTH} items (at most {MAX_SET_STEPS}): make the costliest cheaper"
        ));
    }
    if problems.is_empty() {
        Ok(RuleSet {
            grows_with_arguments: calls.iter().any(|r| r.uses_arguments && r.cost.grows()),
            base_steps,
            saved_steps: set_steps,
            reads_arguments: calls.iter().any(|r| r.uses_arguments),
            set,
            calls,
            servers,
            quotas,
            token_quotas,
            env: Arc::new(cel::Env::stdlib()),
            bases: moka::sync::Cache::builder()
                .max_capacity(BASES_KEPT)
                .time_to_live(BASE_TTL)
                .build(),
        })
    } else {
        Err(problems)
    }
}

struct Inner {
    store: Store,
    metrics: Arc<Metrics>,
    current: RwLock<Arc<RuleSet>>,
    attributes: moka::future::Cache<UserId, Arc<UserAttributes>>,
}

/// The rules in force and the users' attributes, shared by every door a call comes in by.
#[derive(Clone)]
pub struct Policies {
    inner: Arc<Inner>,
}

impl Policies {
    /// Reads the set in force and keeps following it (each second, while this lives).
    pub async fn load(store: Store, metrics: Arc<Metrics>) -> Result<Self> {
        let set = store.policies().current().await?;
        let compiled = compile(set).map_err(|problems| {
            Error::Unexpected(anyhow::anyhow!(
                "the stored policy rules do not compile: {}",
                problems.join("; ")
            ))
        })?;
        let policies = Self {
            inner: Arc::new(Inner {
                store,
                metrics,
                current: RwLock::new(Arc::new(compiled)),
                attributes: moka::future::Cache::builder()
                    .max_capacity(100_000)
                    .time_to_live(ATTRIBUTES_TTL)
                    .build(),
            }),
        };
        let weak = Arc::downgrade(&policies.inner);
        tokio::spawn(follow(weak));
        Ok(policies)
    }

    fn compiled(&self) -> Arc<RuleSet> {
        self.inner.current.read().expect("not poisoned").clone()
    }

    /// Whether any rule or quota applies to calls: none, and a call costs no lookup here.
    pub fn governs_calls(&self) -> bool {
        self.compiled().governs_calls()
    }

    pub fn current(&self) -> PolicySet {
        self.compiled().set.clone()
    }

    fn description(&self, rule: &str) -> String {
        let compiled = self.compiled();
        compiled
            .calls
            .iter()
            .chain(&compiled.servers)
            .find(|r| r.rule.name == rule)
            .map(|r| r.rule.description.clone())
            .unwrap_or_default()
    }

    /// Checks and saves a new set (422 naming each rule that does not compile, with the
    /// line and column), in force here at once and elsewhere within a second.
    pub async fn save(
        &self,
        rules: Vec<PolicyRule>,
        quotas: Vec<Quota>,
        by: Option<String>,
    ) -> Result<PolicySet> {
        PolicySet::check_rules(&rules)?;
        PolicySet::check_quotas(&quotas)?;
        let draft = PolicySet {
            version: 0,
            rules,
            quotas,
            updated_at: None,
            updated_by: by,
        };
        compile(draft.clone()).map_err(|problems| Error::Validation(problems.join("; ")))?;
        let saved = self.inner.store.policies().save(&draft).await?;
        tracing::info!(version = saved.version, rules = saved.rules.len(), by = ?saved.updated_by, "policy rules saved");
        self.install(saved.clone());
        Ok(saved)
    }

    fn install(&self, set: PolicySet) {
        match compile(set) {
            Ok(compiled) => {
                let mut current = self.inner.current.write().expect("not poisoned");
                if compiled.set.version >= current.set.version {
                    *current = Arc::new(compiled);
                }
            }
            Err(problems) => tracing::error!(
                ?problems,
                "stored policy rules do not compile; the previous set stays in force"
            ),
        }
    }

    /// Reads the set again when another instance saved a newer one.
    async fn refresh(&self) -> Result<()> {
        let version = self.inner.store.policies().current_version().await?;
        if version > self.compiled().set.version {
            let set = self.inner.store.policies().current().await?;
            self.install(set);
        }
        Ok(())
    }

    pub async fn attributes(&self, user: &UserId) -> Result<Arc<UserAttributes>> {
        if let Some(found) = self.inner.attributes.get(user).await {
            return Ok(found);
        }
        let found = Arc::new(self.inner.store.policies().attributes(user).await?);
        self.inner
            .attributes
            .insert(user.clone(), found.clone())
            .await;
        Ok(found)
    }

    pub async fn set_attributes(&self, user: &UserId, attributes: UserAttributes) -> Result<()> {
        self.inner
            .store
            .policies()
            .set_attributes(user, &attributes)
            .await?;
        self.inner
            .attributes
            .insert(user.clone(), Arc::new(attributes))
            .await;
        Ok(())
    }

    /// The decision on a tool call (or, without arguments, on offering the tool).
    pub fn decide_call(&self, facts: &CallFacts<'_>) -> Decision {
        self.compiled()
            .decide_call(facts, Some(&self.inner.metrics))
    }

    /// The decision of a draft's rules and quotas (else those in force) on a sample call:
    /// the test form. Nothing is counted.
    pub fn test(
        &self,
        draft: Option<(Vec<PolicyRule>, Vec<Quota>)>,
        call: &SampleCall,
    ) -> Result<Decision> {
        let compiled = match draft {
            Some((rules, quotas)) => {
                PolicySet::check_rules(&rules)?;
                PolicySet::check_quotas(&quotas)?;
                let draft = PolicySet {
                    rules,
                    quotas,
                    ..PolicySet::empty()
                };
                Arc::new(compile(draft).map_err(|p| Error::Validation(p.join("; ")))?)
            }
            None => self.compiled(),
        };
        let mut context = cel::Context::with_env(compiled.env.clone());
        let mut user = json!({"id": "", "groups": [], "plan": ""});
        merge(&mut user, &Value::Object(call.user.clone()));
        context.add_variable_from_value("user", to_cel(&user));
        let mut server = json!({"id": "", "name": "", "type": "", "host": "", "preset": "",
            "catalog": "", "global": false, "team": ""});
        merge(&mut server, &Value::Object(call.server.clone()));
        context.add_variable_from_value("server", to_cel(&server));
        let rules = match call.on {
            RuleScope::Server => &compiled.servers,
            RuleScope::Call => {
                let mut tool = json!({"name": "", "title": "", "annotations": {
                    "readOnlyHint": false, "destructiveHint": true,
                    "idempotentHint": false, "openWorldHint": true}});
                merge(&mut tool, &Value::Object(call.tool.clone()));
                context.add_variable_from_value("tool", to_cel(&tool));
                context.add_variable_from_value("path", call.path.as_str());
                if let Some(arguments) = &call.arguments {
                    context.add_variable_from_value(
                        "arguments",
                        to_cel(&Value::Object(arguments.clone())),
                    );
                }
                &compiled.calls
            }
        };
        let length = call
            .arguments
            .as_ref()
            .map_or(0, |a| cost::longest(&Value::Object(a.clone())))
            .max(SAVED_AT_LENGTH);
        let mut decision = decide(rules, &context, None, length);
        if call.on == RuleScope::Call {
            decision.quotas = counting(&compiled.quotas, &context);
        }
        Ok(decision)
    }

    /// Counts an allowed call against each of `quotas` (by name, as a decision lists
    /// them): all or none, so a call one quota refuses costs nothing in the others.
    pub async fn charge(&self, user: &UserId, quotas: &[String]) -> Result<()> {
        if quotas.is_empty() {
            return Ok(());
        }
        let compiled = self.compiled();
        let now = chrono::Utc::now().timestamp();
        let repo = self.inner.store.policies();
        let mut taken: Vec<(&str, String, i64)> = Vec::new();
        let mut refusal = None;
        for name in quotas {
            let Some(found) = compiled.quotas.iter().find(|q| &q.quota.name == name) else {
                continue;
            };
            let quota = &found.quota;
            let subject = quota_subject(quota, user);
            let window_end = quota.window.end_after(now);
            match repo
                .take_quota(&quota.name, &subject, window_end, quota.limit)
                .await
            {
                Ok(Some(_)) => taken.push((&quota.name, subject, window_end)),
                Ok(None) => {
                    refusal = Some(self.used_up(quota, "calls", window_end - now));
                    break;
                }
                Err(error) => {
                    refusal = Some(error.into());
                    break;
                }
            }
        }
        let Some(refusal) = refusal else {
            return Ok(());
        };
        for (name, subject, window_end) in taken {
            if let Err(error) = repo.give_back_quota(name, &subject, window_end).await {
                tracing::warn!(%error, quota = name, "could not give back a quota's unit");
            }
        }
        Err(refusal)
    }

    /// The sampling-token quotas that apply to `user`, each with its subject and window:
    /// refused (with the first that is used up) when one has no tokens left.
    pub async fn sampling_allowance(&self, user: &UserId) -> Result<Vec<TokenCount>> {
        let compiled = self.compiled();
        if compiled.token_quotas.is_empty() {
            return Ok(Vec::new());
        }
        let attributes = self.attributes(user).await?;
        let mut context = cel::Context::with_env(compiled.env.clone());
        context.add_variable_from_value("user", user_value(user, &attributes));
        context.add_variable_from_value("path", "sampling");
        let now = chrono::Utc::now().timestamp();
        let repo = self.inner.store.policies();
        let mut counts = Vec::new();
        for found in &compiled.token_quotas {
            if !holds(&found.program, &context) {
                continue;
            }
            let quota = &found.quota;
            let count = TokenCount {
                quota: quota.name.clone(),
                subject: quota_subject(quota, user),
                window_end: quota.window.end_after(now),
            };
            let used = repo
                .quota_used(&count.quota, &count.subject, count.window_end)
                .await?;
            if used >= quota.limit {
                return Err(self.used_up(quota, "sampling tokens", count.window_end - now));
            }
            counts.push(count);
        }
        Ok(counts)
    }

    /// The refusal of `quota`, used up with `seconds_left` in its window, counted.
    fn used_up(&self, quota: &Quota, what: &'static str, seconds_left: i64) -> Error {
        self.inner
            .metrics
            .policy_decision(&quota.name, "quota_exceeded", "enforced");
        Error::QuotaExceeded {
            quota: quota.name.clone(),
            limit: quota.limit,
            what,
            window: quota.window.as_str(),
            retry_after: Duration::from_secs(seconds_left.max(1) as u64),
        }
    }

    /// Adds the `tokens` a sampling request used to the quotas
    /// [`Self::sampling_allowance`] found (a request that began under the limit finishes,
    /// and may pass it by its own size).
    pub async fn count_sampling(&self, counts: &[TokenCount], tokens: u64) {
        for count in counts {
            if let Err(error) = self
                .inner
                .store
                .policies()
                .add_quota(&count.quota, &count.subject, count.window_end, tokens)
                .await
            {
                tracing::warn!(%error, quota = %count.quota, "could not count sampling tokens");
            }
        }
    }

    /// Each quota with what `user` has used of it in the window now (a shared quota: what
    /// everyone it applies to has used).
    pub async fn usage(&self, user: &UserId) -> Result<Vec<QuotaUse>> {
        let compiled = self.compiled();
        let now = chrono::Utc::now();
        let mut uses = Vec::with_capacity(compiled.quotas.len());
        for found in compiled.quotas.iter().chain(&compiled.token_quotas) {
            let quota = &found.quota;
            let window_end = quota.window.end_after(now.timestamp());
            let used = self
                .inner
                .store
                .policies()
                .quota_used(&quota.name, &quota_subject(quota, user), window_end)
                .await?;
            uses.push(QuotaUse {
                quota: quota.clone(),
                used,
                resets_at: chrono::DateTime::from_timestamp(window_end, 0).unwrap_or(now),
            });
        }
        Ok(uses)
    }

    /// The decision on a server a user creates or changes.
    pub fn decide_server(
        &self,
        user: &UserId,
        attributes: &UserAttributes,
        server: &McpServer,
    ) -> Decision {
        let compiled = self.compiled();
        if compiled.servers.is_empty() {
            return Decision::allow();
        }
        let mut context = cel::Context::with_env(compiled.env.clone());
        context.add_variable_from_value("user", user_value(user, attributes));
        context.add_variable_from_value("server", server_value(server));
        // Server rules read no arguments: bounded when saved.
        decide(
            &compiled.servers,
            &context,
            Some(&self.inner.metrics),
            SAVED_AT_LENGTH,
        )
    }
}

impl RuleSet {
    /// Compiles `rules` (the problems, one line per rule that does not compile).
    pub fn compile(rules: Vec<PolicyRule>) -> std::result::Result<Self, Vec<String>> {
        compile(PolicySet {
            rules,
            ..PolicySet::empty()
        })
    }

    fn governs_calls(&self) -> bool {
        !self.calls.is_empty() || !self.quotas.is_empty()
    }

    /// The first applying rule's decision on a call; `metrics` counts it.
    pub fn decide_call(&self, facts: &CallFacts<'_>, metrics: Option<&Metrics>) -> Decision {
        if !self.governs_calls() {
            return Decision::allow();
        }
        let arguments = facts.arguments.filter(|_| self.reads_arguments);
        // The lists a condition iterates are the call's own: measured only where some
        // rule's cost depends on them.
        let length = match arguments {
            Some(arguments) if self.grows_with_arguments => {
                cost::longest(arguments).max(SAVED_AT_LENGTH)
            }
            _ => SAVED_AT_LENGTH,
        };
        let steps = if length == SAVED_AT_LENGTH {
            self.saved_steps
        } else {
            self.calls
                .iter()
                .filter(|r| r.uses_arguments)
                .fold(self.base_steps, |sum, r| {
                    sum.saturating_add(r.cost.at(length).min(MAX_STEPS))
                })
        };
        off_reactor(steps, || {
            self.decide_call_on(facts, arguments, length, metrics)
        })
    }

    fn decide_call_on(
        &self,
        facts: &CallFacts<'_>,
        arguments: Option<&Value>,
        length: u64,
        metrics: Option<&Metrics>,
    ) -> Decision {
        let base = self.base(facts, metrics);
        // Bound only when a rule must be evaluated: binding converts the arguments deeply.
        let mut context: Option<cel::Context<'_, '_>> = None;
        let mut unevaluated = None;
        let mut decision = decide_by(
            &self.calls,
            |index, compiled| {
                if let Some(decided) = base.applies[index] {
                    return decided;
                }
                // Listing a tool: a rule that reads the arguments cannot apply yet.
                let Some(arguments) = arguments else {
                    return false;
                };
                if let (Some(keys), Some(without)) =
                    (&compiled.argument_keys, base.without_arguments[index])
                    && keys.iter().all(|key| arguments.get(key).is_none())
                {
                    return without;
                }
                if let Some(reason) = too_costly(compiled, length) {
                    return unevaluated_applies(compiled, reason, &mut unevaluated);
                }
                let context = context.get_or_insert_with(|| {
                    let mut scope = base.context.new_inner_scope();
                    scope.add_variable_from_value("arguments", to_cel(arguments));
                    scope
                });
                applies(compiled, context, metrics)
            },
            metrics,
        );
        decision.quotas.clone_from(&base.quotas);
        with_reason(decision, unevaluated)
    }

    /// The call's base, from the cache or built (every rule that does not read the
    /// arguments evaluated once).
    fn base(&self, facts: &CallFacts<'_>, metrics: Option<&Metrics>) -> Arc<CallBase> {
        let hash = BaseKey::hash_of(facts);
        if let Some(found) = self.bases.get(&hash)
            && found.key.matches(facts)
        {
            return found;
        }
        let mut context = cel::Context::with_env(self.env.clone());
        context.add_variable_from_value("user", user_value(facts.user, facts.attributes));
        context.add_variable_from_value("server", server_value(facts.server));
        context.add_variable_from_value("tool", tool_value(facts.tool));
        context.add_variable_from_value("path", facts.via.as_str());
        let applies = self
            .calls
            .iter()
            .map(|compiled| {
                if !compiled.uses_arguments {
                    return Some(applies(compiled, &context, metrics));
                }
                match compiled.program.execute(&context) {
                    Ok(cel::Value::Bool(false)) => Some(false),
                    _ => None,
                }
            })
            .collect();
        let without_arguments = {
            let mut empty = context.new_inner_scope();
            empty.add_variable_from_value("arguments", to_cel(&json!({})));
            self.calls
                .iter()
                .map(|compiled| {
                    compiled.argument_keys.as_ref()?;
                    Some(holds(&compiled.program, &empty))
                })
                .collect()
        };
        let quotas = counting(&self.quotas, &context);
        let base = Arc::new(CallBase {
            key: BaseKey {
                user: facts.user.clone(),
                attributes: facts.attributes.clone(),
                server: facts.server.id,
                server_saved: facts.server.updated_at,
                tool: facts.tool.clone(),
                via: facts.via,
            },
            context,
            applies,
            without_arguments,
            quotas,
        });
        self.bases.insert(hash, base.clone());
        base
    }
}

/// A call as the test form gives it, each part as rules see it; what is left out reads
/// as empty (annotations as the MCP specification's defaults).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SampleCall {
    /// `call` (a tool call, the default) or `server` (a server being saved).
    #[serde(default = "call_scope")]
    pub on: RuleScope,
    /// `{id, groups, plan}`
    #[serde(default)]
    #[schema(value_type = Object)]
    pub user: JsonObject,
    /// `{id, name, type, host, preset, catalog, global, team}`
    #[serde(default)]
    #[schema(value_type = Object)]
    pub server: JsonObject,
    /// `{name, title, annotations: {readOnlyHint, destructiveHint, idempotentHint, openWorldHint}}`
    #[serde(default)]
    #[schema(value_type = Object)]
    pub tool: JsonObject,
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<JsonObject>,
    /// `rest`, `chat`, `gateway`, `xiaozhi` or `grpc`.
    #[serde(default = "rest_path")]
    pub path: String,
}

fn call_scope() -> RuleScope {
    RuleScope::Call
}

fn rest_path() -> String {
    "rest".into()
}

/// `given`'s keys over `base`'s, objects merged key by key.
fn merge(base: &mut Value, given: &Value) {
    match (base, given) {
        (Value::Object(base), Value::Object(given)) => {
            for (key, value) in given {
                match base.get_mut(key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (slot, value) if !value.is_null() => *slot = value.clone(),
        _ => {}
    }
}

/// The rules for the calls of one user through one door, their attributes read once: what
/// listing tools and planning a model's calls ask of each call.
pub struct CallDecider {
    /// None when no rule applies to calls: everything is allowed, nothing is read.
    governed: Option<(Policies, Arc<UserAttributes>)>,
    user: UserId,
    via: CallVia,
}

impl CallDecider {
    /// A decider that allows everything (no rules, or a caller outside governance).
    pub fn allowing(user: &UserId, via: CallVia) -> Self {
        Self {
            governed: None,
            user: user.clone(),
            via,
        }
    }

    pub fn decide(
        &self,
        server: &McpServer,
        tool: &rmcp::model::Tool,
        arguments: Option<&Value>,
    ) -> Decision {
        match &self.governed {
            None => Decision::allow(),
            Some((policies, attributes)) => policies.decide_call(&CallFacts {
                user: &self.user,
                attributes,
                server,
                tool,
                arguments,
                via: self.via,
            }),
        }
    }

    /// Whether a model is offered the tool: not when a rule denies it whatever the
    /// arguments (a rule that reads the arguments cannot apply yet).
    pub fn offers(&self, server: &McpServer, tool: &rmcp::model::Tool) -> bool {
        !self.decide(server, tool, None).is_denied()
    }

    /// What the decisions depend on besides the call: the rules' version and the user's
    /// attributes (a view of tools built under others is stale).
    pub fn fingerprint(&self) -> (i64, Option<Arc<UserAttributes>>) {
        match &self.governed {
            None => (0, None),
            Some((policies, attributes)) => {
                (policies.compiled().set.version, Some(attributes.clone()))
            }
        }
    }

    /// The refusal of a decision, for the caller to read.
    pub fn refusal(&self, decision: &Decision) -> Option<Error> {
        let (policies, _) = self.governed.as_ref()?;
        decision.refusal(policies)
    }
}

impl Policies {
    pub async fn decider(&self, user: &UserId, via: CallVia) -> Result<CallDecider> {
        if !self.governs_calls() {
            return Ok(CallDecider::allowing(user, via));
        }
        Ok(CallDecider {
            governed: Some((self.clone(), self.attributes(user).await?)),
            user: user.clone(),
            via,
        })
    }
}

/// What a user has used of a quota in the window now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUse {
    pub quota: Quota,
    pub used: u64,
    /// When the window ends and the count starts again.
    pub resets_at: chrono::DateTime<chrono::Utc>,
}

/// Where a sampling request's tokens are counted.
pub struct TokenCount {
    quota: String,
    subject: String,
    window_end: i64,
}

/// Whose count a call of `user` goes to.
fn quota_subject(quota: &Quota, user: &UserId) -> String {
    match quota.per {
        QuotaSubject::User => user.as_str().to_owned(),
        // `*` is not allowed in user ids: no user's own count can be named so.
        QuotaSubject::Shared => "*".to_owned(),
    }
}

/// Follows the stored set while the service lives, and deletes old quota counts.
async fn follow(weak: Weak<Inner>) {
    let mut reloads: u64 = 0;
    loop {
        tokio::time::sleep(RELOAD_EVERY).await;
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let policies = Policies { inner };
        if let Err(error) = policies.refresh().await {
            tracing::debug!(%error, "could not read the policy rules' version");
        }
        reloads += 1;
        if reloads.is_multiple_of(SWEEP_EVERY_RELOADS) {
            let day_ago = chrono::Utc::now().timestamp() - 86_400;
            if let Err(error) = policies.inner.store.policies().sweep_quotas(day_ago).await {
                tracing::debug!(%error, "could not delete old quota counts");
            }
        }
    }
}

/// Whether `compiled`'s condition is true in `context`; one that cannot be evaluated (or
/// is not a boolean) does not apply, and is counted.
fn applies(
    compiled: &RuleSetRule,
    context: &cel::Context<'_, '_>,
    metrics: Option<&Metrics>,
) -> bool {
    match compiled.program.execute(context) {
        Ok(cel::Value::Bool(applies)) => applies,
        Ok(_) | Err(_) => {
            if let Some(metrics) = metrics {
                metrics.policy_decision(
                    &compiled.rule.name,
                    compiled.rule.action.as_str(),
                    "error",
                );
            }
            false
        }
    }
}

/// The first rule that applies decides (dry-run ones are counted and passed over);
/// `length`: the longest list the context holds.
fn decide(
    rules: &[RuleSetRule],
    context: &cel::Context<'_, '_>,
    metrics: Option<&Metrics>,
    length: u64,
) -> Decision {
    let mut unevaluated = None;
    let decision = decide_by(
        rules,
        |_, compiled| match too_costly(compiled, length) {
            Some(reason) => unevaluated_applies(compiled, reason, &mut unevaluated),
            None => applies(compiled, context, metrics),
        },
        metrics,
    );
    with_reason(decision, unevaluated)
}

fn decide_by(
    rules: &[RuleSetRule],
    mut applies: impl FnMut(usize, &RuleSetRule) -> bool,
    metrics: Option<&Metrics>,
) -> Decision {
    let count = |rule: &str, action: &'static str, mode: &'static str| {
        if let Some(metrics) = metrics {
            metrics.policy_decision(rule, action, mode);
        }
    };
    let mut dry_run = Vec::new();
    let mut redact = Vec::new();
    for (index, compiled) in rules.iter().enumerate() {
        if !applies(index, compiled) {
            continue;
        }
        let rule = &compiled.rule;
        if rule.dry_run {
            if rule.action != PolicyAction::Allow {
                tracing::warn!(rule = %rule.name, action = rule.action.as_str(), "policy rule in dry run would have decided");
                count(&rule.name, rule.action.as_str(), "dry_run");
                dry_run.push(rule.name.clone());
            }
            continue;
        }
        count(&rule.name, rule.action.as_str(), "enforced");
        if rule.action == PolicyAction::Redact {
            redact.extend(rule.fields.iter().cloned());
            continue;
        }
        return Decision {
            action: rule.action.as_str(),
            rule: Some(rule.name.clone()),
            dry_run,
            redact,
            quotas: Vec::new(),
            reason: None,
        };
    }
    Decision {
        dry_run,
        redact,
        ..Decision::allow()
    }
}

/// The top-level keys `expr` reads of `arguments`, when it reads it only as
/// `arguments.<key>`; `None` when it reads it whole (`size(arguments)`, `"k" in
/// arguments`, `arguments["k"]`) or a comprehension names a variable `arguments`.
fn argument_keys(expr: &cel::IdedExpr) -> Option<Vec<String>> {
    use cel::common::ast::{EntryExpr, Expr};
    fn walk(expr: &cel::IdedExpr, keys: &mut BTreeSet<String>) -> bool {
        match &expr.expr {
            Expr::Ident(name) => name != "arguments",
            Expr::Select(select) => match &select.operand.expr {
                Expr::Ident(name) if name == "arguments" => {
                    keys.insert(select.field.clone());
                    true
                }
                _ => walk(&select.operand, keys),
            },
            Expr::Call(call) => {
                call.target.as_deref().is_none_or(|t| walk(t, keys))
                    && call.args.iter().all(|a| walk(a, keys))
            }
            Expr::Comprehension(c) => {
                let shadows = [Some(&c.iter_var), c.iter_var2.as_ref(), Some(&c.accu_var)]
                    .into_iter()
                    .flatten()
                    .any(|v| v == "arguments");
                !shadows
                    && [
                        &c.iter_range,
                        &c.accu_init,
                        &c.loop_cond,
                        &c.loop_step,
                        &c.result,
                    ]
                    .into_iter()
                    .all(|e| walk(e, keys))
            }
            Expr::List(list) => list.elements.iter().all(|e| walk(e, keys)),
            Expr::Map(map) => map.entries.iter().all(|e| entry(&e.expr, keys)),
            Expr::Struct(st) => st.entries.iter().all(|e| entry(&e.expr, keys)),
            Expr::Literal(_) | Expr::Unspecified => true,
        }
    }
    fn entry(entry: &EntryExpr, keys: &mut BTreeSet<String>) -> bool {
        match entry {
            EntryExpr::StructField(field) => walk(&field.value, keys),
            EntryExpr::MapEntry(pair) => walk(&pair.key, keys) && walk(&pair.value, keys),
        }
    }
    let mut keys = BTreeSet::new();
    walk(expr, &mut keys).then(|| keys.into_iter().collect())
}

fn to_cel(value: &Value) -> cel::Value {
    cel::to_value(value).unwrap_or(cel::Value::Null)
}

fn user_value(user: &UserId, attributes: &UserAttributes) -> cel::Value {
    to_cel(&json!({
        "id": user.as_str(),
        "groups": attributes.groups,
        "plan": attributes.plan.as_deref().unwrap_or(""),
    }))
}

fn server_value(server: &McpServer) -> cel::Value {
    let spec = &server.spec;
    let host = spec
        .transport
        .remote()
        .and_then(|e| e.url.expose().host_str().map(str::to_owned))
        .unwrap_or_default();
    let preset = spec
        .transport
        .stdio()
        .filter(|_| spec.catalog.is_none())
        .map(|s| s.preset.clone())
        .unwrap_or_default();
    to_cel(&json!({
        "id": server.id.to_string(),
        "name": spec.name.as_str(),
        "type": spec.transport.kind().as_str(),
        "host": host,
        "preset": preset,
        "catalog": spec.catalog.as_ref().map(|c| c.entry.as_str()).unwrap_or(""),
        "global": server.user_id == UserId::global(),
        "team": server.team.as_deref().unwrap_or(""),
    }))
}

/// A tool's name, title and annotations, each hint with the MCP specification's default
/// when the server leaves it out (`destructiveHint` and `openWorldHint` true).
fn tool_value(tool: &rmcp::model::Tool) -> cel::Value {
    let annotations = tool.annotations.as_ref();
    let hint = |pick: fn(&rmcp::model::ToolAnnotations) -> Option<bool>, default: bool| {
        annotations.and_then(pick).unwrap_or(default)
    };
    let mut annotated = BTreeMap::new();
    annotated.insert("readOnlyHint", hint(|a| a.read_only_hint, false));
    annotated.insert("destructiveHint", hint(|a| a.destructive_hint, true));
    annotated.insert("idempotentHint", hint(|a| a.idempotent_hint, false));
    annotated.insert("openWorldHint", hint(|a| a.open_world_hint, true));
    to_cel(&json!({
        "name": tool.name.as_ref(),
        "title": tool.title.as_deref().unwrap_or(""),
        "annotations": annotated,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(when: &str) -> Option<Vec<String>> {
        argument_keys(cel::Program::compile(when).unwrap().expression())
    }

    #[test]
    fn argument_keys_are_known_only_when_read_by_name() {
        assert_eq!(
            keys(r#"has(arguments.path) && arguments.path.startsWith("/etc")"#),
            Some(vec!["path".to_owned()])
        );
        assert_eq!(
            keys(r#"tool.name == "x" || arguments.a.b > 1 && !has(arguments.c)"#),
            Some(vec!["a".to_owned(), "c".to_owned()])
        );
        assert_eq!(keys("user.plan == \"free\""), Some(Vec::new()));
        for whole in [
            "size(arguments) > 1",
            r#""path" in arguments"#,
            r#"arguments["path"] == 1"#,
            "[1].exists(arguments, arguments > 0)",
        ] {
            assert_eq!(keys(whole), None, "{whole}");
        }
    }
}
