//! The EXAMPLES of the man pages: real command lines, each one parsed by the test below, by
//! page (`bulkhead-apply` is `bulkhead apply`).

/// (what it does, the command line)
pub type Example = (&'static str, &'static str);

const TOP: &[Example] = &[
    (
        "Print the plan, resolved for this host:",
        "bulkhead plan show",
    ),
    (
        "Create the slices, after looking at what that writes:",
        "sudo bulkhead apply --dry-run",
    ),
    ("", "sudo bulkhead apply"),
    (
        "Run a backup in the helper slice:",
        "sudo bulkhead run --slice db-helper --uid postgres pg_dumpall -f /var/backups/all.sql",
    ),
    (
        "See what each slice uses and how much it stalls:",
        "bulkhead status",
    ),
];

const PAGES: &[(&str, &[Example])] = &[
    ("bulkhead", TOP),
    (
        "bulkhead-plan-show",
        &[
            ("The plan in force, in bytes and weights:", "bulkhead plan show"),
            ("The same plan for a bigger host:", "bulkhead plan show --memory 64G --cpus 16"),
            ("As JSON, from a plan file:", "bulkhead -c ./bulkhead.toml plan show --json"),
        ],
    ),
    (
        "bulkhead-apply",
        &[
            ("Every write apply would make, and none made:", "sudo bulkhead apply --dry-run"),
            ("Create or update the slices:", "sudo bulkhead apply"),
            ("Through systemd, as unit files that survive a reboot:", "sudo bulkhead apply --backend systemd --persist"),
        ],
    ),
    (
        "bulkhead-run",
        &[
            ("A backup as the postgres user, in the helper slice:", "sudo bulkhead run --slice db-helper --uid postgres pg_dump -Z9 -f /var/backups/db.dump db"),
            ("Say how the command was put into the slice:", "sudo bulkhead run -v --slice db-helper -- nice tar czf /var/backups/etc.tgz /etc"),
        ],
    ),
    (
        "bulkhead-move",
        &[
            ("Move a running process (all its threads) into the server slice:", "sudo bulkhead move --slice db-server 1234"),
            ("Move it out of every slice again:", "sudo bulkhead move --slice / 1234"),
            ("The PostgreSQL postmaster with every process it runs, after seeing which:", "sudo bulkhead move --tree --dry-run --slice db-server 1234"),
            ("", "sudo bulkhead move --tree --slice db-server 1234"),
        ],
    ),
    (
        "bulkhead-place",
        &[
            ("What the plan's [place.NAME] rules would move now:", "sudo bulkhead place --dry-run"),
            ("Move what matches now, then exit:", "sudo bulkhead place --once"),
            ("Keep placing processes as they start, one JSON line each:", "sudo bulkhead place --interval 100ms --json"),
        ],
    ),
    (
        "bulkhead-status",
        &[
            ("Usage and pressure of every slice:", "bulkhead status"),
            ("Refreshed every 2 seconds:", "bulkhead status --watch 2"),
            ("For node_exporter's textfile collector:", "bulkhead status --format prometheus"),
        ],
    ),
    (
        "bulkhead-exporter",
        &[("Serve /metrics on the default port:", "bulkhead exporter --listen 127.0.0.1:9649")],
    ),
    (
        "bulkhead-destroy",
        &[
            ("What would be removed:", "sudo bulkhead destroy --dry-run"),
            ("Remove the slices, killing what still runs in them:", "sudo bulkhead destroy --kill"),
        ],
    ),
    (
        "bulkhead-guard",
        &[
            ("What the guard would read and write:", "bulkhead guard --dry-run"),
            ("Guard for ten minutes, logging every action:", "sudo bulkhead guard --duration 10m --log /var/log/bulkhead-guard.jsonl"),
        ],
    ),
    (
        "bulkhead-spawn",
        &[
            ("A shell in an ephemeral copy of an image, in the helper slice:", "sudo bulkhead spawn -x -D debian --slice db-helper -- sh"),
            ("What the sandbox's start would do:", "bulkhead spawn --dry-run -x -D /var/lib/bulkhead/images/debian -- true"),
        ],
    ),
    (
        "bulkhead-serve",
        &[
            ("What would listen and how targets would start:", "bulkhead serve --dry-run"),
            ("Serve one socket of the plan:", "sudo bulkhead serve --socket app"),
        ],
    ),
    (
        "bulkhead-import",
        &[("A plan from systemd slice units:", "bulkhead import /etc/systemd/system/db.slice -o bulkhead.toml")],
    ),
    (
        "bulkhead-export-systemd",
        &[
            ("The unit files the plan makes, printed:", "bulkhead export systemd --dry-run /etc/systemd/system"),
            ("For CentOS 7's systemd:", "bulkhead export systemd --systemd-version 219 ./units"),
        ],
    ),
    (
        "bulkhead-hugepages-status",
        &[("Pools, THP and who uses huge pages:", "bulkhead hugepages status")],
    ),
    (
        "bulkhead-hugepages-reset",
        &[("What reset would put back:", "bulkhead hugepages reset --dry-run")],
    ),
    (
        "bulkhead-completions",
        &[("Completion for this bash:", "bulkhead completions bash")],
    ),
    (
        "bulkhead-iocost-calibrate",
        &[("The cost model of the disk under PostgreSQL's data:", "sudo bulkhead iocost calibrate /var/lib/postgresql")],
    ),
];

/// The examples of the page `name` (none for a page without).
pub fn of(name: &str) -> &'static [Example] {
    PAGES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[], |(_, e)| e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::try_parse_from;
    use std::ffi::OsString;

    /// Every example parses, and names the command of its page.
    #[test]
    fn every_example_is_a_command_line_the_parser_takes() {
        for (page, list) in PAGES {
            assert!(!list.is_empty(), "{page}");
            for (_, line) in *list {
                let words: Vec<&str> = line.split_whitespace().collect();
                let words = words.strip_prefix(&["sudo"]).unwrap_or(&words);
                let args: Vec<OsString> = words.iter().map(OsString::from).collect();
                if let Err(e) = try_parse_from(args) {
                    panic!("{page}: {line}: {e}");
                }
                let path: Vec<&str> = page.split('-').skip(1).collect();
                let named = words.iter().filter(|w| path.contains(w)).count();
                assert_eq!(named, path.len(), "{page}: {line}");
            }
        }
    }
}
