use super::*;
use crate::{Plan, EMBEDDED_DEFAULT};

fn plan(extra: &str) -> Result<Plan, String> {
    Plan::parse(&format!("{EMBEDDED_DEFAULT}\n{extra}"), None).map_err(|e| format!("{e:?}"))
}

fn facts<'a>(exe: &'a str, cmdline: &'a str, parent: &'a str) -> Facts<'a> {
    Facts {
        uid: 105,
        exe: Some(exe),
        exe_id: None,
        comm: exe.rsplit('/').next().unwrap(),
        cmdline,
        parent_exe: Some(parent),
        parent_exe_id: None,
        parent_comm: parent.rsplit('/').next().unwrap(),
        unit: Some("postgresql@15-main.service"),
    }
}

#[test]
fn rules_parse_and_match() {
    let p = plan(
        r#"
[place.backup-backends]
slice = "db-helper"
parent = "postgres"
cmdline = "postgres: *backup *"
user = ["postgres", 105]

[place.helpers]
slice = "db-helper"
exe = ["pg_dump", "restic", "/usr/bin/rsync"]
"#,
    )
    .unwrap();
    assert_eq!(p.place.len(), 2);
    let b = &p.place["backup-backends"];
    assert_eq!(b.user, vec!["postgres", "105"]);
    let pg = "/usr/lib/postgresql/15/bin/postgres";
    let backend = facts(pg, "postgres: 15/main: backup postgres [local] COPY", pg);
    assert!(b.matches(&backend, &[105]));
    assert!(!b.matches(&backend, &[0]), "another user");
    let app = facts(pg, "postgres: 15/main: app shop 10.0.0.1(5000) idle", pg);
    assert!(!b.matches(&app, &[105]));
    // Right after fork, before the title is set, the backend's command line is the
    // postmaster's: no match yet (bulkhead place re-checks new processes for a while).
    let young = facts(pg, "/usr/lib/postgresql/15/bin/postgres -D /x", pg);
    assert!(!b.matches(&young, &[105]));

    let h = &p.place["helpers"];
    assert!(h.matches(&facts("/usr/bin/pg_dump", "pg_dump -Z9 db", "/bin/sh"), &[]));
    assert!(h.matches(&facts("/usr/bin/rsync", "rsync -a", "/bin/sh"), &[]));
    assert!(
        !h.matches(&facts("/opt/rsync", "rsync -a", "/bin/sh"), &[]),
        "a path pattern is the whole path"
    );
    assert!(!h.matches(&facts("/usr/bin/pg_dumpall", "pg_dumpall", "/bin/sh"), &[]));
    let e = expected(&p);
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].name, "backup-backends");
    assert_eq!(e[0].slice.as_str(), "db-helper");
    assert_eq!(e[1].matches, "exe = pg_dump|restic|/usr/bin/rsync", "{e:?}");
}

#[test]
fn unit_and_comm() {
    let p = plan("[place.u]\nslice = \"db-server\"\nunit = \"postgresql@*.service\"\n").unwrap();
    let r = &p.place["u"];
    let mut f = facts("/usr/bin/x", "x", "/sbin/init");
    assert!(r.matches(&f, &[]));
    f.unit = None;
    assert!(!r.matches(&f, &[]));
    // A program pattern without a '/' also matches the command name (an unreadable exe).
    let p = plan("[place.c]\nslice = \"db-helper\"\nexe = \"node_exporter\"\n").unwrap();
    let f = Facts {
        comm: "node_exporter",
        ..Facts::default()
    };
    assert!(p.place["c"].matches(&f, &[]));
}

#[test]
fn errors_say_where_and_what_to_do() {
    let cases = [
        ("[place.a]\nslice = \"db-helper\"\n", "matches nothing"),
        ("[place.a]\nexe = \"x\"\n", "needs the slice"),
        (
            "[place.a]\nslice = \"nope\"\nexe = \"x\"\n",
            "'nope' is not a slice",
        ),
        (
            "[place.a]\nslice = \"db-helper\"\nexee = \"x\"\n",
            "did you mean exe?",
        ),
        (
            "[place.a]\nslice = \"db-helper\"\nexe = []\n",
            "1 to 32 patterns",
        ),
        (
            "[place.a]\nslice = \"db-helper\"\nexe = \"\"\n",
            "1 to 256 characters",
        ),
        (
            "[place.a]\nslice = \"db-helper\"\nexe = 3\n",
            "list of strings",
        ),
    ];
    for (text, want) in cases {
        let e = plan(text).unwrap_err();
        assert!(e.contains(want), "{text}: {e}");
    }
    let e = Plan::parse(&format!("place = 1\n{EMBEDDED_DEFAULT}"), None).unwrap_err();
    assert!(format!("{e:?}").contains("table of rules"), "{e:?}");
    let e = plan("[place.a]\nslice = \"nope\"\nexe = \"x\"\n").unwrap_err();
    // The rule's line: after the default plan and the blank line `plan` puts between.
    let line = EMBEDDED_DEFAULT.lines().count() + 2;
    assert!(e.contains(&format!(":{line}:8")), "the rule's line: {e}");
}

#[test]
fn rules_are_bounded() {
    let many: String = (0..=MAX_RULES)
        .map(|i| format!("[place.r{i}]\nslice = \"db-helper\"\nexe = \"x\"\n"))
        .collect();
    let e = plan(&many).unwrap_err();
    assert!(e.contains("more than 64 placement rules"), "{e}");
    let list = format!(
        "[place.a]\nslice = \"db-helper\"\nexe = [{}]\n",
        vec!["\"x\""; MAX_PATTERNS + 1].join(",")
    );
    assert!(plan(&list).unwrap_err().contains("1 to 32 patterns"));
}

#[test]
fn a_rule_into_a_higher_slice_must_say_whose_processes() {
    let e = plan("[place.s]\nslice = \"db-server\"\nexe = \"postgres\"\n").unwrap_err();
    assert!(e.contains("ranks above") && e.contains("CPUWeight"), "{e}");
    plan("[place.s]\nslice = \"db-server\"\nexe = \"postgres\"\nuser = \"root\"\n").unwrap();
    plan("[place.s]\nslice = \"db-server\"\nunit = \"postgresql@*.service\"\n").unwrap();
    // The helper slice ranks below: any process may be sent there.
    plan("[place.h]\nslice = \"db-helper\"\nexe = \"pg_dump\"\n").unwrap();
}

#[test]
fn a_literal_path_is_the_file_it_names() {
    let p = plan("[place.d]\nslice = \"db-helper\"\nexe = [\"/usr/bin/pg_dump\", \"/opt/*/x\"]\n")
        .unwrap();
    let r = &p.place["d"];
    assert!(PlaceRule::literal_path("/usr/bin/pg_dump") && !PlaceRule::literal_path("/opt/*/x"));
    let host = OnHost {
        uids: vec![],
        exe: vec![Program::File((8, 42)), Program::Pattern],
        parent: vec![],
    };
    let mut f = facts("/usr/bin/pg_dump", "pg_dump", "/bin/sh");
    // The path's text is not enough: another file shown at that path (a mount namespace).
    f.exe_id = Some((8, 43));
    assert!(!r.matches_on(&f, &host));
    f.exe_id = Some((8, 42));
    assert!(r.matches_on(&f, &host));
    let missing = OnHost {
        exe: vec![Program::Missing, Program::Pattern],
        ..host.clone()
    };
    assert!(!r.matches_on(&f, &missing));
    // A glob path is still matched by its text.
    let g = facts("/opt/a/x", "x", "/bin/sh");
    assert!(r.matches_on(&g, &host));
}
