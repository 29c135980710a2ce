//! Conditions as Kubernetes' conventions have them: lastTransitionTime changes only when the
//! status does. Pure (the time is given).

use crate::crd::Condition;

pub const APPLIED: &str = "Applied";
pub const DRIFTED: &str = "Drifted";
pub const DEGRADED: &str = "Degraded";

/// A condition of `type_`, keeping the previous one's transition time if its status is the same.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &str,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.to_string(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: since,
        observed_generation: generation,
    }
}

/// The previous condition of a type, if any.
pub fn find<'a>(previous: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    previous.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_status() {
        let a = condition(&[], APPLIED, true, "Applied", "r1", Some(1), "T1");
        assert_eq!(a.last_transition_time, "T1");
        let prev = [a];
        let b = condition(&prev, APPLIED, true, "Applied", "r2", Some(2), "T2");
        assert_eq!(b.last_transition_time, "T1");
        assert_eq!(b.message, "r2");
        let c = condition(&prev, APPLIED, false, "InvalidPlan", "bad", Some(2), "T3");
        assert_eq!(
            (c.status.as_str(), c.last_transition_time.as_str()),
            ("False", "T3")
        );
        assert_eq!(find(&prev, APPLIED).unwrap().message, "r1");
        assert!(find(&prev, DRIFTED).is_none());
    }
}
