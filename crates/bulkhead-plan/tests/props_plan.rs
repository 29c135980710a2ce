//! Property tests of the plan parser (issue 14: no input may panic). Inputs: random text,
//! random TOML documents, and a valid plan (every directive, every socket, guard and huge
//! page key) with one value, key or section name changed to something hostile; device lines
//! of the I/O directives; slice names and endpoints; systemd .slice files for `import`.
//!
//! Properties: no panic; a refusal is bad input (exit 2) whose every diagnostic points into
//! the file (`p.toml:LINE:COL`, a line the file has), and one names the key that was changed
//! at the line it is on; an accepted plan resolves against extreme hosts (no RAM, u64::MAX
//! RAM, 300 CPUs) without panic, with the same kind of diagnostics; printed names and
//! endpoints parse back equal.
//!
//! `cargo test` runs a fast subset; `scripts/props` runs 100,000 cases per property.

#[path = "../../bulkhead-sys/tests/props/support.rs"]
mod support;

#[path = "props/gen.rs"]
mod gen;

use bulkhead_plan::socket::Endpoint;
use bulkhead_plan::{Plan, SliceName};
use bulkhead_sys::error::{Diagnostic, Error, Severity};
use bulkhead_sys::host::Host;
use gen::Change;
use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;
use support::{check, ensure};

const SUITE: &str = "plan";
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/proptest-regressions/props_plan.txt"
);

fn disk() -> &'static str {
    static DISK: OnceLock<String> = OnceLock::new();
    DISK.get_or_init(gen::disk)
}

fn parse(text: &str) -> Result<Plan, Error> {
    Plan::parse(text, Some(Path::new("p.toml")))
}

/// The line of a diagnostic's `p.toml:LINE:COL` location.
fn line_of(d: &Diagnostic) -> Option<usize> {
    let rest = d.location.as_deref()?.strip_prefix("p.toml:")?;
    rest.split(':').next()?.parse().ok()
}

/// Bad input, every finding an error at a line of the file.
fn well_formed(text: &str, e: &Error) -> Result<(), String> {
    let lines = text.lines().count() + 1;
    ensure(e.exit_code() == 2, || {
        format!("not bad input (exit 2): {e}")
    })?;
    let ds = e.diagnostics();
    ensure(!ds.is_empty(), || "an error with no diagnostic".into())?;
    for d in &ds {
        ensure(
            d.severity == Severity::Error && !d.message.is_empty(),
            || format!("not an error with a message: {d}"),
        )?;
        ensure(line_of(d).is_some_and(|l| (1..=lines).contains(&l)), || {
            format!("not at a line of the file ({lines} lines): {d}")
        })?;
    }
    Ok(())
}

/// Keys whose errors may be said at the key they clash with (rules across keys).
const ACROSS: &[&str] = &[
    "listen",
    "mode",
    "backend",
    "ready",
    "accept_proxy_protocol",
    "socket_mode",
    "socket_user",
    "socket_group",
    "rootfs",
    "protect",
    "sideloads",
    "command",
];

/// The refusal of a changed plan names the change: a diagnostic at the changed line that
/// names the key (for a rule across keys: one that names it anywhere).
fn names_change(change: &Change, line: usize, e: &Error) -> Result<(), String> {
    let (key, header) = gen::changed_key(change);
    let ds = e.diagnostics();
    let says = |d: &Diagnostic, what: &str| {
        !what.is_empty()
            && [
                Some(d.message.as_str()),
                d.context.as_deref(),
                d.hint.as_deref(),
            ]
            .into_iter()
            .flatten()
            .any(|t| t.contains(what))
    };
    let at_line = |d: &Diagnostic| line_of(d) == Some(line);
    let ok = match change {
        Change::Header { .. } => {
            let old = header
                .trim_matches(['[', ']'])
                .split_once('.')
                .map_or("", |(_, n)| n);
            let name = key.trim();
            ds.iter()
                .any(|d| says(d, name) || says(d, old) || at_line(d))
        }
        Change::Key { .. } => ds
            .iter()
            .any(|d| at_line(d) && (says(d, key.trim()) || key.trim().is_empty())),
        Change::Value { .. } if ACROSS.contains(&key.as_str()) || header == "[guard]" => ds
            .iter()
            .any(|d| says(d, &key) || at_line(d) && says(d, "protect")),
        Change::Value { .. } => ds.iter().any(|d| at_line(d) && says(d, &key)),
    };
    ensure(ok, || {
        format!("no diagnostic names '{key}' at line {line}:\n{e}")
    })
}

/// Resolve an accepted plan; a refusal points into the file and names a directive or a
/// `[hugepages]` key.
fn resolves(text: &str, plan: &Plan, host: &Host) -> Result<(), String> {
    let names = bulkhead_plan::directive_names();
    let named = |d: &Diagnostic| {
        names
            .iter()
            .any(|n| d.message.starts_with(&format!("{n} = ")))
            || d.context
                .as_deref()
                .is_some_and(|c| c.starts_with("[hugepages]"))
    };
    // The device arguments the plan names, looked up as `apply` does (odd paths included).
    let mut host = host.clone();
    host.look_up_devices(plan.device_paths());
    if let Err(e) = plan.resolve(&host) {
        well_formed(text, &e)?;
        for d in e.diagnostics() {
            ensure(named(&d), || format!("resolve: names no directive: {d}"))?;
        }
    }
    if let Some(spec) = &plan.hugepages {
        for force in [false, true] {
            let facts = gen::facts(host.memory);
            if let Err(e) = bulkhead_plan::hugepages::resolve(spec, &plan.source, &facts, force) {
                well_formed(text, &e)?;
                for d in e.diagnostics() {
                    ensure(named(&d), || format!("hugepages: names no key: {d}"))?;
                }
            }
        }
    }
    Ok(())
}

fn default_host() -> Host {
    let mut h = Host {
        memory: 24 << 30,
        cpus: bulkhead_sys::units::IdSet((0..2).collect()),
        mem_nodes: bulkhead_sys::units::IdSet([0].into_iter().collect()),
        hugepage_sizes: vec![2 << 20, 1 << 30],
        tasks_max: 32768,
        page_size: 4096,
        devices: Default::default(),
    };
    h.look_up_devices([disk()]);
    h
}

/// The plan the changes start from is valid, and covers every directive there is.
#[test]
fn the_base_plan_is_valid_and_complete() {
    let (text, _) = gen::render(
        &Change::Header {
            section: 99,
            name: String::new(),
        },
        disk(),
    );
    let plan = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    plan.resolve(&default_host())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let spec = plan.hugepages.as_ref().expect("[hugepages]");
    bulkhead_plan::hugepages::resolve(spec, &plan.source, &gen::facts(24 << 30), false)
        .unwrap_or_else(|e| panic!("{e}"));
    let covered: Vec<&str> = gen::DIRECTIVES
        .iter()
        .chain(gen::LEGACY)
        .map(|(k, _)| *k)
        .collect();
    for name in bulkhead_plan::directive_names() {
        assert!(covered.contains(&name), "the generator has no {name}");
    }
    assert_eq!(plan.sockets.len(), 1);
    assert!(plan.guard.is_some());
}

#[test]
fn changed_plans() {
    check(
        SUITE,
        "plan with one change",
        REGRESSIONS,
        (gen::change(), gen::host()),
        |(change, host)| {
            let (text, line) = gen::render(&change, disk());
            match parse(&text) {
                Ok(plan) => resolves(&text, &plan, &host),
                Err(e) => {
                    well_formed(&text, &e)?;
                    names_change(&change, line, &e)
                }
            }
        },
    );
}

/// Random TOML documents: sections and keys of every kind, hostile values.
#[test]
fn random_documents() {
    let section = prop_oneof![
        prop::sample::select(vec![
            "slice.db",
            "slice.db-server",
            "slice.a-b-c",
            "socket.app",
            "socket.app.target",
            "guard",
            "hugepages",
            "slice",
            "socket",
            "hugepages.mount",
            "other",
            "slice.\"a b\"",
        ])
        .prop_map(|s| format!("[{s}]")),
        Just("[[hugepages.mount]]".to_string()),
        "[a-z.]{1,12}".prop_map(|s| format!("[{}]", gen::toml_string(&s))),
    ];
    let known: Vec<&'static str> = gen::DIRECTIVES
        .iter()
        .chain(gen::LEGACY)
        .chain(gen::SOCKET)
        .chain(gen::TARGET)
        .chain(gen::GUARD)
        .chain(gen::HUGEPAGES)
        .map(|(k, _)| *k)
        .collect();
    let key = prop_oneof![
        4 => prop::sample::select(known).prop_map(str::to_string),
        1 => gen::key_name().prop_map(|k| gen::toml_string(&k)),
    ];
    let body = prop::collection::vec((key, gen::toml_value()), 0..8);
    let doc = prop::collection::vec((section, body), 0..5).prop_map(|secs| {
        let mut out = String::new();
        for (header, keys) in secs {
            out.push_str(&header);
            out.push('\n');
            let mut seen = std::collections::HashSet::new();
            for (k, v) in keys {
                if seen.insert(k.clone()) {
                    out.push_str(&format!("{k} = {v}\n"));
                }
            }
        }
        out
    });
    check(
        SUITE,
        "random TOML documents",
        REGRESSIONS,
        (doc, gen::host()),
        |(text, host)| match parse(&text) {
            Ok(plan) => resolves(&text, &plan, &host),
            Err(e) => well_formed(&text, &e),
        },
    );
}

/// Random text, and the base plan cut or spliced at any byte.
#[test]
fn random_text() {
    let (base, _) = gen::render(
        &Change::Header {
            section: 99,
            name: String::new(),
        },
        disk(),
    );
    let len = base.len();
    let text = prop_oneof![
        any::<String>(),
        "\\PC{0,200}",
        "[\\[\\]a-zA-Z0-9 =\"'{},.\n#-]{0,200}",
        (0..=len, any::<String>()).prop_map(move |(cut, tail)| {
            let mut cut = cut;
            while !base.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}{tail}", &base[..cut])
        }),
    ];
    check(
        SUITE,
        "random text",
        REGRESSIONS,
        text,
        |text| match parse(&text) {
            Ok(plan) => resolves(&text, &plan, &default_host()),
            Err(e) => well_formed(&text, &e),
        },
    );
}

/// The I/O directives' "DEVICE VALUE" lines: real and missing devices, numbers for devices,
/// relative paths, bad values.
#[test]
fn device_lines() {
    let dev = prop_oneof![
        Just(disk().to_string()),
        prop::sample::select(vec![
            "/dev/sda",
            "/dev/null",
            "/",
            "/proc",
            "/proc/self",
            "/sys/block",
            "/nonexistent/x",
            "8:0",
            "259:4294967295",
            "-1:-1",
            "",
            "relative",
            "/dev/../dev/null",
            "/dev/vda1",
            "/dev/zram0",
            "/dev/loop0",
            "/tmp",
            "/dev/sd\u{0}a",
            "/dev/sda /dev/sdb",
        ])
        .prop_map(str::to_string),
        "/[a-z0-9/._-]{0,20}",
        "\\PC{0,12}",
    ];
    let value = prop_oneof![
        gen::text_value(),
        (0u32..20_000).prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "max",
            "infinity",
            "0",
            "-1",
            "10M",
            "1.5G",
            "18446744073709551615"
        ])
        .prop_map(str::to_string),
    ];
    let sep = prop::sample::select(vec![" ", "  ", "\t", "", " \u{a0}"]);
    let line = (dev, sep, value).prop_map(|(d, s, v)| format!("{d}{s}{v}"));
    let directive = prop::sample::select(vec![
        "IODeviceWeight",
        "IODeviceLatencyTargetSec",
        "IOReadBandwidthMax",
        "IOWriteBandwidthMax",
        "IOReadIOPSMax",
        "IOWriteIOPSMax",
        "BlockIODeviceWeight",
        "BlockIOReadBandwidth",
        "BlockIOWriteBandwidth",
    ]);
    let input = (
        directive,
        prop::collection::vec(line, 1..4),
        prop::bool::ANY,
        gen::host(),
    );
    check(
        SUITE,
        "device lines",
        REGRESSIONS,
        input,
        |(directive, lines, as_list, host)| {
            let value = if as_list || lines.len() > 1 {
                let items: Vec<String> =
                    lines.iter().map(|l| gen::toml_string(l.as_str())).collect();
                format!("[{}]", items.join(", "))
            } else {
                gen::toml_string(&lines[0])
            };
            let text = format!("[slice.db]\n{directive} = {value}\n");
            match parse(&text) {
                Ok(plan) => resolves(&text, &plan, &host),
                Err(e) => {
                    well_formed(&text, &e)?;
                    let named = e.diagnostics().iter().any(|d| {
                        line_of(d) == Some(2)
                            && (d.message.contains(directive)
                                || d.context.as_deref().is_some_and(|c| c.contains(directive)))
                    });
                    ensure(named, || {
                        format!("does not name {directive} at line 2: {e}")
                    })
                }
            }
        },
    );
}

/// Slice names and endpoints: no panic, and what is accepted prints and parses back equal.
#[test]
fn names_and_endpoints() {
    let text = prop_oneof![
        gen::text_value(),
        "[a-z0-9:._-]{0,20}",
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, p)| { format!("{}:{p}", std::net::Ipv4Addr::from(ip)) }),
        (
            any::<[u16; 8]>(),
            any::<u16>(),
            prop::sample::select(vec!["", "udp:", "tcp:"])
        )
            .prop_map(|(ip, p, k)| format!("{k}[{}]:{p}", std::net::Ipv6Addr::from(ip))),
        "unix:/[ -~]{0,120}",
    ];
    check(SUITE, "slice names and endpoints", REGRESSIONS, text, |s| {
        if let Ok(n) = SliceName::parse(&s) {
            let back = SliceName::parse(&n.to_string()).map_err(|e| format!("{n}: {e}"))?;
            ensure(back == n, || format!("{s:?} -> {n} -> {back}"))?;
            let _ = (n.cgroup_path(), n.lineage(), n.unit());
        }
        if let Ok(e) = Endpoint::parse(&s) {
            let printed = e.to_string();
            let back = Endpoint::parse(&printed).map_err(|m| format!("{printed}: {m}"))?;
            ensure(back == e, || format!("{s:?} -> {printed} -> {back:?}"))?;
        }
        Ok(())
    });
}

/// systemd .slice files (with hostile lines) for `bulkhead import`: what it writes is a plan
/// that loads, and a refusal says where.
#[test]
fn imported_slice_files() {
    let dir = std::env::temp_dir().join(format!("bulkhead-props-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let file = dir.join("db-helper.slice");
    let key = prop_oneof![
        4 => prop::sample::select(
            gen::DIRECTIVES.iter().chain(gen::LEGACY).map(|(k, _)| *k).collect::<Vec<_>>()
        ).prop_map(str::to_string),
        1 => prop::sample::select(vec!["Before", "WantedBy", "X-Foo", ""]).prop_map(str::to_string),
        1 => "[A-Za-z]{1,12}",
    ];
    let line = prop_oneof![
        6 => (key, gen::text_value()).prop_map(|(k, v)| format!("{k}={v}")),
        1 => prop::sample::select(vec![
            "[Unit]", "[Slice]", "[Install]", "[X-Bulkhead]", "[Service]", "[", "]", "[]", "#x",
            ";x", "\\", "=", "Description=%%", "MemoryMax=", "CPUWeight=\\",
        ])
        .prop_map(str::to_string),
        1 => "\\PC{0,30}",
    ];
    let text =
        prop::collection::vec(line, 0..10).prop_map(|l| format!("[Slice]\n{}\n", l.join("\n")));
    check(SUITE, "import .slice files", REGRESSIONS, text, |text| {
        std::fs::write(&file, &text).map_err(|e| e.to_string())?;
        match bulkhead_plan::import::import(std::slice::from_ref(&file)) {
            Ok(plan) => parse(&plan)
                .map(|_| ())
                .map_err(|e| format!("import wrote a plan that does not load: {e}\n{plan}")),
            Err(e) => {
                ensure(e.exit_code() == 2, || format!("not bad input: {e}"))?;
                for d in e.diagnostics() {
                    ensure(d.location.as_deref().is_some_and(|l| !l.is_empty()), || {
                        format!("no location: {d}")
                    })?;
                }
                Ok(())
            }
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[hugepages]` alone, every part of it generated: page size keys, amounts (counts,
/// sizes near u64's limit, shares of RAM), per-node tables, THP words, mounts.
#[test]
fn huge_pages() {
    let size_key = prop_oneof![
        prop::sample::select(vec![
            "2M", "1G", "2MB", "2048kB", "4K", "3M", "0K", "1T", "x"
        ])
        .prop_map(str::to_string),
        (
            gen::number(),
            prop::sample::select(vec!["K", "M", "G", "kB", "MB", "GB"])
        )
            .prop_map(|(n, s)| format!("{n}{s}")),
    ];
    let amount = prop_oneof![
        3 => (
            prop_oneof![
                gen::number(),
                // Just below 16E, 16384P, ...: one page more is past u64.
                prop::sample::select(vec!["15.999999999999998", "16383.999999999998"])
                    .prop_map(str::to_string),
            ],
            prop::sample::select(vec!["", "K", "M", "G", "T", "P", "E", "%"]),
        )
            .prop_map(|(n, s)| gen::toml_string(&format!("{n}{s}"))),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => gen::toml_value(),
    ];
    let node_table = prop::collection::vec(
        (
            prop::sample::select(vec!["node0", "node1", "node7", "0", "x"]),
            amount.clone(),
        ),
        0..3,
    )
    .prop_map(|v| {
        let mut seen = std::collections::HashSet::new();
        let items: Vec<String> = v
            .into_iter()
            .filter(|(k, _)| seen.insert(*k))
            .map(|(k, a)| format!("{k} = {a}"))
            .collect();
        format!("{{ {} }}", items.join(", "))
    });
    let pool_value = prop_oneof![3 => amount.clone(), 1 => node_table];
    let pools = prop::collection::vec((size_key, pool_value), 0..4).prop_map(|v| {
        let mut seen = std::collections::HashSet::new();
        let items: Vec<String> = v
            .into_iter()
            .filter(|(k, _)| seen.insert(k.clone()))
            .map(|(k, a)| format!("{} = {a}", gen::toml_string(&k)))
            .collect();
        format!("pools = {{ {} }}\n", items.join(", "))
    });
    let word = prop_oneof![
        prop::sample::select(vec!["always", "madvise", "never", "defer", "madvice", ""])
            .prop_map(gen::toml_string),
        gen::toml_value(),
    ];
    let thp = prop_oneof![
        word.clone().prop_map(|w| format!("thp = {w}\n")),
        (word.clone(), word)
            .prop_map(|(a, b)| format!("thp = {{ enabled = {a}, defrag = {b} }}\n")),
        Just(String::new()),
    ];
    let mount = (
        prop_oneof![
            prop::sample::select(vec![
                "/dev/hugepages",
                "/mnt/a",
                "rel",
                "/a/../b",
                "/a,b",
                "/"
            ])
            .prop_map(gen::toml_string),
            gen::toml_value(),
        ],
        prop_oneof![
            prop::sample::select(vec!["2M", "1G", "4M", "x"]).prop_map(gen::toml_string),
            gen::toml_value(),
        ],
        amount,
        prop_oneof![
            prop::sample::select(vec!["\"1770\"", "0o1770", "755", "\"99999\"", "0o77777"])
                .prop_map(str::to_string),
            gen::toml_value(),
        ],
    )
        .prop_map(|(p, s, a, m)| {
            format!("mount = {{ path = {p}, pagesize = {s}, size = {a}, mode = {m} }}\n")
        });
    let section = (
        pools,
        thp,
        prop_oneof![1 => mount.prop_map(Some), 2 => Just(None)],
    )
        .prop_map(|(p, t, m)| format!("[hugepages]\n{p}{t}{}", m.unwrap_or_default()));
    let memory = prop_oneof![Just(24u64 << 30), Just(0), Just(u64::MAX), any::<u64>()];
    check(
        SUITE,
        "huge pages",
        REGRESSIONS,
        (section, memory),
        |(text, memory)| match parse(&text) {
            Ok(plan) => {
                let spec = plan.hugepages.as_ref().ok_or("no [hugepages]")?;
                for force in [false, true] {
                    let facts = gen::facts(memory);
                    if let Err(e) =
                        bulkhead_plan::hugepages::resolve(spec, &plan.source, &facts, force)
                    {
                        well_formed(&text, &e)?;
                        for d in e.diagnostics() {
                            ensure(
                                d.context
                                    .as_deref()
                                    .is_some_and(|c| c.starts_with("[hugepages]")),
                                || format!("names no [hugepages] key: {d}"),
                            )?;
                        }
                    }
                }
                Ok(())
            }
            Err(e) => well_formed(&text, &e),
        },
    );
}
