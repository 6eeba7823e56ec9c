//! What a rule's condition may cost, bounded twice: when the rules are saved (at the list
//! lengths rules are written for) and before each evaluation (at the lengths of the
//! call's own arguments). CEL has no loops, but its macros (`all`, `exists`,
//! `exists_one`, `map`, `filter`) iterate and nested ones multiply: five over 30 items
//! are 24 million iterations, half a minute. The interpreter cannot be stopped part-way,
//! so a condition is never started past its budget.

use std::collections::HashMap;

use cel::common::ast::{EntryExpr, Expr};

use super::{Decision, PolicyAction, RuleSetRule};

/// Steps (expression nodes evaluated, about 0.1 µs each) a call's rules may take
/// together: a few milliseconds at most.
pub(super) const MAX_STEPS: u64 = 50_000;
/// The list length a condition is checked at when saved: what rules are written for (a
/// user is in at most 64 groups).
pub(super) const SAVED_AT_LENGTH: u64 = 64;
/// Past this many steps an evaluation is moved off the async worker, so that other
/// requests (`/healthz` among them) are not held behind it.
const INLINE_STEPS: u64 = 2_000;

/// A condition's steps as a polynomial in the longest list or map the call gives it:
/// `terms[k]` × n^k. A comprehension multiplies its body by its range's length.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Cost {
    terms: Vec<u64>,
}

impl Cost {
    pub(super) fn of(expr: &cel::IdedExpr) -> Self {
        walk(expr, &mut HashMap::new()).0
    }

    /// Steps with lists and maps of at most `length` items.
    pub(super) fn at(&self, length: u64) -> u64 {
        self.terms.iter().rev().fold(0u64, |total, &term| {
            total.saturating_mul(length).saturating_add(term)
        })
    }

    /// Whether the cost depends on the call's lists (something is iterated).
    pub(super) fn grows(&self) -> bool {
        self.terms.iter().skip(1).any(|&t| t > 0)
    }

    pub(super) fn plus(&self, other: &Cost) -> Cost {
        let len = self.terms.len().max(other.terms.len());
        Cost {
            terms: (0..len)
                .map(|k| {
                    let a = self.terms.get(k).copied().unwrap_or(0);
                    a.saturating_add(other.terms.get(k).copied().unwrap_or(0))
                })
                .collect(),
        }
    }

    fn constant(c: u64) -> Cost {
        Cost { terms: vec![c] }
    }

    /// n: a list the call gives.
    fn input() -> Cost {
        Cost { terms: vec![0, 1] }
    }

    fn times(&self, other: &Cost) -> Cost {
        if self.terms.is_empty() || other.terms.is_empty() {
            return Cost::default();
        }
        let mut terms = vec![0u64; self.terms.len() + other.terms.len() - 1];
        for (i, &a) in self.terms.iter().enumerate() {
            for (j, &b) in other.terms.iter().enumerate() {
                terms[i + j] = terms[i + j].saturating_add(a.saturating_mul(b));
            }
        }
        Cost { terms }
    }
}

/// Why `compiled` is not evaluated on lists of `length` items: it would cost too much.
pub(super) fn too_costly(compiled: &RuleSetRule, length: u64) -> Option<String> {
    let steps = compiled.cost.at(length);
    (steps > MAX_STEPS).then(|| {
        format!(
            "its condition would take about {steps} steps on these arguments (lists of {length} items; a rule may take {MAX_STEPS}), so it was applied without being evaluated"
        )
    })
}

/// Runs an evaluation of about `steps` steps; a long one gives its async worker's other
/// requests to another worker first, so none (`/healthz` among them) waits behind it.
pub(super) fn off_reactor<T>(steps: u64, evaluate: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let threaded = Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread);
    if steps > INLINE_STEPS && threaded {
        tokio::task::block_in_place(evaluate)
    } else {
        evaluate()
    }
}

/// A condition that costs too much at the lengths rules are saved at.
pub(super) fn over_budget(list: &str, i: usize, name: &str, steps: u64) -> String {
    format!(
        "{list}[{i}].when ('{name}'): its cost is about {steps} steps on lists of {SAVED_AT_LENGTH} items, over the {MAX_STEPS} a condition may take: nest fewer macros (all, exists, exists_one, map, filter) or iterate shorter lists"
    )
}

/// A rule too costly to evaluate: it applies where applying is the careful side (a
/// refusal, an approval, a redaction), not where it would allow; `unevaluated` keeps the
/// first such rule and why.
pub(super) fn unevaluated_applies(
    compiled: &RuleSetRule,
    reason: String,
    unevaluated: &mut Option<(String, String)>,
) -> bool {
    tracing::warn!(rule = %compiled.rule.name, %reason, "policy rule not evaluated");
    unevaluated.get_or_insert_with(|| (compiled.rule.name.clone(), reason));
    compiled.rule.action != PolicyAction::Allow
}

/// The decision, saying why when the rule that made it was not evaluated.
pub(super) fn with_reason(
    mut decision: Decision,
    unevaluated: Option<(String, String)>,
) -> Decision {
    if let Some((rule, reason)) = unevaluated
        && decision.rule.as_ref() == Some(&rule)
    {
        decision.reason = Some(reason);
    }
    decision
}

/// The longest list or map in `value` (nested ones included).
pub(super) fn longest(value: &serde_json::Value) -> u64 {
    use serde_json::Value;
    match value {
        Value::Array(items) => items.iter().map(longest).fold(items.len() as u64, u64::max),
        Value::Object(map) => map.values().map(longest).fold(map.len() as u64, u64::max),
        _ => 0,
    }
}

/// An expression's steps, and how many items it holds if it is a list or map. `sizes`:
/// the comprehension variables in scope and how many items each may hold.
fn walk(expr: &cel::IdedExpr, sizes: &mut HashMap<String, Cost>) -> (Cost, Cost) {
    let one = Cost::constant(1);
    match &expr.expr {
        Expr::Ident(name) => (one, sizes.get(name).cloned().unwrap_or_else(Cost::input)),
        Expr::Literal(_) | Expr::Unspecified => (one.clone(), one),
        Expr::Select(select) => (walk(&select.operand, sizes).0.plus(&one), Cost::input()),
        Expr::Call(call) => {
            let mut cost = one;
            let mut last_size = Cost::default();
            for part in call.target.iter().map(|t| &**t).chain(&call.args) {
                let (steps, size) = walk(part, sizes);
                cost = cost.plus(&steps);
                last_size = size;
            }
            // `x in list` looks through the list.
            if call.func_name == "@in" {
                cost = cost.plus(&last_size);
            }
            (cost, Cost::input())
        }
        Expr::List(list) => {
            let cost = list
                .elements
                .iter()
                .fold(one, |cost, e| cost.plus(&walk(e, sizes).0));
            (cost, Cost::constant(list.elements.len() as u64))
        }
        Expr::Map(map) => entries(&map.entries, sizes),
        Expr::Struct(structure) => entries(&structure.entries, sizes),
        Expr::Comprehension(c) => {
            let (range_cost, range_size) = walk(&c.iter_range, sizes);
            let (init_cost, _) = walk(&c.accu_init, sizes);
            let mut scope = sizes.clone();
            scope.insert(c.iter_var.clone(), Cost::input());
            if let Some(second) = &c.iter_var2 {
                scope.insert(second.clone(), Cost::input());
            }
            // What `map` and `filter` gather holds at most the range's items.
            scope.insert(c.accu_var.clone(), range_size.clone());
            let (cond_cost, _) = walk(&c.loop_cond, &mut scope);
            let (step_cost, _) = walk(&c.loop_step, &mut scope);
            let (result_cost, result_size) = walk(&c.result, &mut scope);
            let cost = range_cost
                .plus(&init_cost)
                .plus(&range_size.times(&cond_cost.plus(&step_cost)))
                .plus(&result_cost);
            (cost, result_size)
        }
    }
}

fn entries(
    entries: &[cel::common::ast::IdedEntryExpr],
    sizes: &mut HashMap<String, Cost>,
) -> (Cost, Cost) {
    let mut cost = Cost::constant(1);
    for entry in entries {
        match &entry.expr {
            EntryExpr::MapEntry(e) => {
                cost = cost
                    .plus(&walk(&e.key, sizes).0)
                    .plus(&walk(&e.value, sizes).0);
            }
            EntryExpr::StructField(f) => cost = cost.plus(&walk(&f.value, sizes).0),
        }
    }
    (cost, Cost::constant(entries.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(condition: &str) -> Cost {
        Cost::of(cel::Program::compile(condition).unwrap().expression())
    }

    #[test]
    fn a_condition_without_macros_costs_its_size_whatever_the_lists() {
        let plain = cost(r#"tool.name == "x" && user.plan in ["a", "b"]"#);
        assert!(!plain.grows());
        assert!(plain.at(1_000_000) < 20, "{plain:?}");
    }

    #[test]
    fn nested_macros_multiply_by_their_ranges() {
        let pairwise = cost("arguments.items.exists(a, arguments.items.exists(b, a == b))");
        assert!(pairwise.grows());
        // At the length rules are saved at, within the budget (benches/hot_paths.rs
        // times it).
        let saved = pairwise.at(SAVED_AT_LENGTH);
        assert!((30_000..40_000).contains(&saved), "{saved}");
        let (small, large) = (pairwise.at(50), pairwise.at(20_000));
        assert!(small < MAX_STEPS, "{small}");
        assert!(large > MAX_STEPS, "{large}");
        // A literal range costs what it holds, with any arguments.
        let items =
            "[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29]";
        let nested = cost(&format!(
            "{items}.all(a, {items}.all(b, {items}.all(c, {items}.all(d, {items}.all(e, a + b + c + d + e >= 0)))))"
        ));
        assert!(!nested.grows(), "{nested:?}");
        assert!(nested.at(0) > 24_000_000, "{nested:?}");
    }

    #[test]
    fn the_longest_list_is_found_at_any_depth() {
        let value = serde_json::json!({"a": [1, 2], "b": {"c": [[1, 2, 3, 4, 5]]}});
        assert_eq!(longest(&value), 5);
    }
}
