//! Issue 41 #2: a rule for PostgreSQL's backends (a `cmdline` pattern that starts with
//! `postgres:`) that claims no process while a dump runs. The dump's server-side work (the
//! COPY, the reads) runs in its backend; when the rule's pattern does not fit the cluster's
//! process titles (`cluster_name` set or not), that work stays in the server's slice while
//! `check` would otherwise say "0 process(es) in db-helper", OK. Pure.

use super::verdict::{Area, Finding, Level};

/// The tools whose backends such a rule is for.
pub const DUMPS: &[&str] = &["pg_dump", "pg_dumpall", "pg_basebackup"];

/// One rule as judged here.
pub struct BackendRule<'a> {
    pub name: &'a str,
    pub slice: &'a str,
    pub cmdline: &'a [String],
    /// Processes it claims now.
    pub claimed: usize,
}

/// A warning for each backend rule that claims nothing while one of `dumps` (comm, PID) runs.
pub fn findings(rules: &[BackendRule<'_>], dumps: &[(String, u32)]) -> Vec<Finding> {
    let Some((tool, pid)) = dumps.first() else {
        return vec![];
    };
    rules
        .iter()
        .filter(|r| r.claimed == 0 && r.cmdline.iter().any(|c| c.starts_with("postgres:")))
        .map(|r| {
            Finding::new(
                Area::Placement,
                Level::Warning,
                format!(
                    "rule {} matches no process while {tool} {pid} runs: the dump's backend is not in {} (its work runs in the server's slice)",
                    r.name, r.slice
                ),
            )
            .hint(format!(
                "compare the rule's cmdline ({}) with the backends' titles (ps -o args -C postgres): with cluster_name set they read \"postgres: NAME: USER DB ...\"; the pattern [\"postgres: backup *\", \"postgres: *: backup *\"] fits both",
                r.cmdline.join(", ")
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_backend_rule_is_a_warning_only_while_a_dump_runs() {
        let pats = vec!["postgres: 15/main: backup *".to_string()];
        let other = vec!["* -p 5432 *".to_string()];
        let rule = |claimed, cmdline| BackendRule {
            name: "backup-backends",
            slice: "db-helper",
            cmdline,
            claimed,
        };
        let dump = vec![("pg_dump".to_string(), 42)];
        assert!(findings(&[rule(0, &pats)], &[]).is_empty());
        assert!(findings(&[rule(1, &pats)], &dump).is_empty());
        assert!(findings(&[rule(0, &other)], &dump).is_empty());
        let f = findings(&[rule(0, &pats)], &dump);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].area, f[0].level), (Area::Placement, Level::Warning));
        assert!(
            f[0].message
                .starts_with("rule backup-backends matches no process while pg_dump 42 runs"),
            "{f:?}"
        );
    }
}
