//! Issue 41 #2: a rule for PostgreSQL's backends (a `cmdline` pattern that starts with
//! `postgres:`) that claims no process while a dump runs. The dump's server-side work (the
//! COPY, the reads) runs in its backend; when the rule's pattern does not fit the cluster's
//! process titles (`cluster_name` set or not), that work stays in the server's slice while
//! `check` would otherwise say "0 process(es) in db-helper", OK. Issue 43 #3: a rule that did
//! place backends while PostgreSQL 18 reads through its I/O workers (`io_method = worker`,
//! the default), which stay in the server's slice: the backend's CPU moved, its reads did
//! not. Pure.

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

/// Whether a process title is one of PostgreSQL 18's I/O workers: `postgres: io worker 0`,
/// or `postgres: 18/main: io worker 0` where cluster_name is set.
pub fn is_io_worker(title: &str) -> bool {
    title.strip_prefix("postgres: ").is_some_and(|rest| {
        rest.starts_with("io worker ")
            || rest
                .split_once(": ")
                .is_some_and(|(_, t)| t.starts_with("io worker "))
    })
}

/// A warning for each backend rule that placed backends while `workers` I/O workers do the
/// server's reads.
pub fn reads_in_workers(rules: &[BackendRule<'_>], workers: usize) -> Vec<Finding> {
    if workers == 0 {
        return vec![];
    }
    rules
        .iter()
        .filter(|r| r.claimed > 0 && r.cmdline.iter().any(|c| c.starts_with("postgres:")))
        .map(|r| {
            Finding::new(
                Area::Placement,
                Level::Warning,
                format!(
                    "rule {} placed {} backend(s) in {}, but this PostgreSQL reads through {workers} I/O worker(s) (io_method = worker, PostgreSQL 18's default) in the server's slice: the backends' reads stay there, only their CPU moved",
                    r.name, r.claimed, r.slice
                ),
            )
            .hint(
                "to move the reads with the backend, set io_method = 'sync' (each backend reads for itself) or 'io_uring' (a build with liburing) in postgresql.conf and restart; docs/POSTGRESQL.md has the cost measured",
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_18s_io_workers_are_known_by_their_titles() {
        assert!(is_io_worker("postgres: io worker 0"));
        assert!(is_io_worker("postgres: 18/main: io worker 2"));
        assert!(!is_io_worker("postgres: checkpointer"));
        assert!(!is_io_worker("postgres: 18/main: backup db [local] COPY"));
        assert!(!is_io_worker("io worker 0"));
    }

    #[test]
    fn a_placed_backend_whose_reads_stay_with_io_workers_is_a_warning() {
        let pats = vec!["postgres: backup *".to_string()];
        let rule = |claimed| BackendRule {
            name: "backup-backends",
            slice: "db-helper",
            cmdline: &pats,
            claimed,
        };
        assert!(reads_in_workers(&[rule(1)], 0).is_empty());
        assert!(reads_in_workers(&[rule(0)], 3).is_empty());
        let f = reads_in_workers(&[rule(1)], 3);
        assert_eq!((f.len(), f[0].level), (1, Level::Warning));
        assert!(
            f[0].message.contains("reads through 3 I/O worker(s)"),
            "{f:?}"
        );
        assert!(f[0].hint.as_deref().unwrap().contains("io_method = 'sync'"));
    }

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
