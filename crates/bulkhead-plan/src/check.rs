//! The `[check]` section: what this host cannot enforce, acknowledged by the operator.
//! `bulkhead check` still reports an accepted finding, marked accepted with the plan line
//! that accepts it, but a warning about it no longer lowers the verdict: PROTECTED then means
//! "as protected as this host allows", and the details say what it does not cover.
//!
//! ```toml
//! [check]
//! accept = ["io"]   # findings about what the host lacks: io (no I/O lever acts on the
//!                   # database's disk), no_effect (a directive this kernel does not
//!                   # enforce), swap, thp
//! ```
//!
//! Only areas about the host's capabilities may be accepted; placement, slices, drift and
//! access are about bulkhead's own work and always count.

use crate::values::Ctx;
use crate::{Loc, Source};
use bulkhead_sys::error::Diagnostic;
use toml::de::DeValue;
use toml::Spanned;

/// The finding areas `accept` may name (check's `Area` names).
pub const ACCEPTABLE: &[&str] = &["io", "no_effect", "swap", "thp"];

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckSpec {
    /// Accepted areas, each once.
    pub accept: Vec<String>,
    /// Where `accept` is written (`plan.toml:12:1`), for the finding's text.
    pub at: String,
}

impl CheckSpec {
    /// Where `area`'s acceptance is written, when the plan accepts it.
    pub fn accepts(&self, area: &str) -> Option<&str> {
        self.accept
            .iter()
            .any(|a| a == area)
            .then_some(self.at.as_str())
    }
}

/// Parse the value of the top-level `check` key.
pub(crate) fn parse(
    source: &Source,
    key_start: usize,
    value: &Spanned<DeValue<'_>>,
    errors: &mut Vec<Diagnostic>,
) -> Option<CheckSpec> {
    let loc = source.loc(key_start);
    let mut cx = Ctx {
        source,
        section: "[check]".into(),
        errors,
    };
    let Some(table) = value.get_ref().as_table() else {
        cx.err(
            loc,
            "",
            "'check' must be a table".into(),
            "write [check] on its own line, then accept = [\"io\"]",
        );
        return None;
    };
    let before = cx.errors.len();
    let mut spec = CheckSpec {
        accept: vec![],
        at: source.at(loc),
    };
    for (k, v) in table.iter() {
        let kloc = source.loc(k.span().start);
        match k.get_ref().as_ref() {
            "accept" => {
                spec.at = source.at(kloc);
                spec.accept = accepted(&mut cx, kloc, v.get_ref());
            }
            other => cx.err(
                kloc,
                other,
                format!("unknown key '{other}'"),
                "[check] takes: accept",
            ),
        }
    }
    (cx.errors.len() == before).then_some(spec)
}

fn accepted(cx: &mut Ctx<'_>, loc: Loc, v: &DeValue<'_>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in cx.strings(loc, "accept", v).unwrap_or_default() {
        if !ACCEPTABLE.contains(&a.as_str()) {
            let hint = format!(
                "accept takes what the host may lack: {}; placement, slices, drift and access always count",
                ACCEPTABLE.join(", ")
            );
            cx.err(loc, "accept", format!("'{a}' cannot be accepted"), &hint);
        } else if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::Plan;

    #[test]
    fn accept_names_host_areas_only_and_says_where() {
        let p = Plan::parse(
            "[slice.db]\n[check]\naccept = [\"io\", \"io\", \"thp\"]\n",
            None,
        )
        .unwrap();
        let c = p.check.unwrap();
        assert_eq!(c.accept, ["io", "thp"]);
        assert_eq!(c.accepts("io"), Some("<embedded default plan>:3:1"));
        assert_eq!(c.accepts("swap"), None);
        let e = Plan::parse("[check]\naccept = [\"placement\"]\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'placement' cannot be accepted"), "{e}");
        assert!(e.contains(":2:1"), "{e}");
        let e = Plan::parse("[check]\naccpt = [\"io\"]\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown key 'accpt'"), "{e}");
    }
}
