//! The reconcile decision, pure: given this node's labels, the plans the agent sees and the
//! plan it applied last, which plan applies here, which plans conflict, and what to undo.
//! No I/O: the loop in `reconcile` gathers the inputs and carries the decision out.

use std::collections::BTreeMap;

/// What the decision needs of one BulkheadPlan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanView {
    pub name: String,
    pub generation: i64,
    /// metadata.creationTimestamp, RFC 3339 (sorts as time).
    pub created: String,
    pub selector: BTreeMap<String, String>,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
}

/// Whether a nodeSelector matches a node's labels (every pair present; empty: every node).
pub fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// The plan that applies to this node, and its generation.
    pub target: Option<(String, i64)>,
    /// Plans that also select this node and are not applied: name -> the plan applied instead.
    pub losers: BTreeMap<String, String>,
    /// The target's rivals (for its own Degraded condition).
    pub rivals: Vec<String>,
    /// The plan applied last is no longer the target: remove what it made.
    pub remove_previous: bool,
}

/// Decide. Of several plans selecting the node, the one applied already keeps it; else the
/// oldest (creation time, then name). A plan being deleted selects nothing.
pub fn decide(
    labels: &BTreeMap<String, String>,
    plans: &[PlanView],
    previous: Option<&str>,
) -> Decision {
    let mut selecting: Vec<&PlanView> = plans
        .iter()
        .filter(|p| !p.deleting && selects(&p.selector, labels))
        .collect();
    selecting.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
    let winner = selecting
        .iter()
        .find(|p| Some(p.name.as_str()) == previous)
        .or_else(|| selecting.first())
        .copied();
    let mut d = Decision::default();
    if let Some(w) = winner {
        d.target = Some((w.name.clone(), w.generation));
        for p in selecting.iter().filter(|p| p.name != w.name) {
            d.losers.insert(p.name.clone(), w.name.clone());
            d.rivals.push(p.name.clone());
        }
    }
    d.remove_previous = match previous {
        Some(prev) => d.target.as_ref().is_none_or(|(n, _)| n != prev),
        None => false,
    };
    d
}

/// The longest label value Kubernetes takes (a plan's name may have up to 253 characters).
pub const MAX_LABEL_VALUE: usize = 63;

/// The node labels the agent wants: plan name and revision, or none. A plan name too long for
/// a label value is left out (the revision label still says the node runs a plan).
pub fn labels_for(applied: Option<(&str, i64)>) -> BTreeMap<&'static str, Option<String>> {
    let (p, r) = match applied {
        Some((n, g)) => (
            (n.len() <= MAX_LABEL_VALUE).then(|| n.to_string()),
            Some(g.to_string()),
        ),
        None => (None, None),
    };
    BTreeMap::from([(crate::crd::LABEL_PLAN, p), (crate::crd::LABEL_REVISION, r)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn plan(name: &str, created: &str, sel: &[(&str, &str)]) -> PlanView {
        PlanView {
            name: name.into(),
            generation: 1,
            created: created.into(),
            selector: m(sel),
            deleting: false,
        }
    }

    #[test]
    fn selector_matches_like_a_daemonset() {
        let labels = m(&[("pool", "redis"), ("zone", "a")]);
        assert!(selects(&m(&[]), &labels));
        assert!(selects(&m(&[("pool", "redis")]), &labels));
        assert!(!selects(&m(&[("pool", "redis"), ("zone", "b")]), &labels));
        assert!(!selects(&m(&[("other", "")]), &labels));
    }

    #[test]
    fn one_plan_applies_and_nothing_else() {
        let labels = m(&[("pool", "redis")]);
        let plans = [
            plan("redis", "2026-01-01T00:00:00Z", &[("pool", "redis")]),
            plan("scylla", "2025-01-01T00:00:00Z", &[("pool", "scylla")]),
        ];
        let d = decide(&labels, &plans, None);
        assert_eq!(d.target, Some(("redis".into(), 1)));
        assert!(d.losers.is_empty() && !d.remove_previous);
        // Applied already: same decision, nothing removed.
        assert_eq!(decide(&labels, &plans, Some("redis")), d);
    }

    #[test]
    fn two_plans_the_applied_one_keeps_the_node() {
        let labels = m(&[("pool", "redis")]);
        let plans = [
            plan("new", "2026-02-01T00:00:00Z", &[]),
            plan("old", "2026-01-01T00:00:00Z", &[("pool", "redis")]),
        ];
        let d = decide(&labels, &plans, None);
        assert_eq!(d.target.as_ref().unwrap().0, "old");
        assert_eq!(d.losers, m(&[("new", "old")]));
        assert_eq!(d.rivals, vec!["new".to_string()]);
        let d = decide(&labels, &plans, Some("new"));
        assert_eq!(d.target.as_ref().unwrap().0, "new");
        assert_eq!(d.losers, m(&[("old", "new")]));
        assert!(!d.remove_previous);
    }

    #[test]
    fn same_time_breaks_ties_by_name() {
        let t = "2026-01-01T00:00:00Z";
        let plans = [plan("b", t, &[]), plan("a", t, &[])];
        assert_eq!(decide(&m(&[]), &plans, None).target.unwrap().0, "a");
    }

    #[test]
    fn selector_change_or_deletion_removes() {
        let labels = m(&[("pool", "redis")]);
        let p = plan("redis", "2026-01-01T00:00:00Z", &[("pool", "other")]);
        let d = decide(&labels, std::slice::from_ref(&p), Some("redis"));
        assert_eq!(d.target, None);
        assert!(d.remove_previous);
        // Deleted: gone from the list, or still there with a deletionTimestamp.
        let d = decide(&labels, &[], Some("redis"));
        assert!(d.remove_previous && d.target.is_none());
        let mut p = plan("redis", "2026-01-01T00:00:00Z", &[]);
        p.deleting = true;
        let d = decide(&labels, &[p], Some("redis"));
        assert!(d.remove_previous && d.target.is_none());
    }

    #[test]
    fn switching_plans_removes_the_previous_one() {
        let plans = [plan("b", "2026-01-01T00:00:00Z", &[])];
        let d = decide(&m(&[]), &plans, Some("a"));
        assert_eq!(d.target.unwrap().0, "b");
        assert!(d.remove_previous);
    }

    #[test]
    fn labels_follow_the_applied_plan() {
        let l = labels_for(Some(("redis", 3)));
        assert_eq!(l[crate::crd::LABEL_PLAN].as_deref(), Some("redis"));
        assert_eq!(l[crate::crd::LABEL_REVISION].as_deref(), Some("3"));
        assert!(labels_for(None).values().all(Option::is_none));
        let long = "p".repeat(MAX_LABEL_VALUE + 1);
        let l = labels_for(Some((&long, 1)));
        assert_eq!(l[crate::crd::LABEL_PLAN], None);
        assert_eq!(l[crate::crd::LABEL_REVISION].as_deref(), Some("1"));
    }
}
