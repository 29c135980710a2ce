//! Generators of plan input for the property suites (included with `#[path]` by
//! bulkhead-plan's and bulkhead-cgroups' suites): a valid plan with a line per directive and
//! per key of every section, hostile values rendered as TOML (strings, integers past i64,
//! floats past f64, NaN, inf, lists, inline tables, dates), and fake hosts.

#![allow(dead_code)]

use bulkhead_sys::host::hugepages::{Choice, Facts, Pool, Thp};
use bulkhead_sys::host::Host;
use bulkhead_sys::units::IdSet;
use proptest::prelude::*;

/// A block device of this machine, for the I/O directives of the base plan (a missing one
/// only makes those directives fail to resolve, which the properties allow).
pub fn disk() -> String {
    bulkhead_sys::host::disks()
        .into_iter()
        .filter_map(|d| d.kernel_name())
        .map(|n| format!("/dev/{n}"))
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| "/dev/vda".into())
}

/// Every slice directive with a valid value; `{DISK}` stands for [`disk`].
pub const DIRECTIVES: &[(&str, &str)] = &[
    ("Description", "\"The database server\""),
    ("CPUWeight", "1000"),
    ("CPUQuota", "\"150%\""),
    ("CPUQuotaPeriodSec", "\"50ms\""),
    ("CPUSchedulingSliceSec", "\"1ms\""),
    ("AllowedCPUs", "\"0-1\""),
    ("AllowedMemoryNodes", "\"0\""),
    ("MemoryMin", "\"100M\""),
    ("MemoryLow", "\"200M\""),
    ("MemoryHigh", "{ value = \"4%\", min = \"1200M\" }"),
    (
        "MemoryMax",
        "{ value = \"5%\", min = \"1400M\", max = \"8G\" }",
    ),
    ("MemorySwapMax", "0"),
    ("IOWeight", "1000"),
    ("IODeviceWeight", "[\"{DISK} 200\"]"),
    ("IODeviceLatencyTargetSec", "[\"{DISK} 25ms\"]"),
    ("IOReadBandwidthMax", "[\"{DISK} 10M\"]"),
    ("IOWriteBandwidthMax", "\"{DISK} 5M\""),
    ("IOReadIOPSMax", "[\"{DISK} 1K\"]"),
    ("IOWriteIOPSMax", "[\"{DISK} infinity\"]"),
    ("TasksMax", "\"10%\""),
    ("HugetlbMax", "{ \"2M\" = \"1G\" }"),
    ("CPUAccounting", "true"),
    ("MemoryAccounting", "\"yes\""),
    ("IOAccounting", "true"),
    ("BlockIOAccounting", "false"),
    ("TasksAccounting", "true"),
];

/// The deprecated directives, in a slice of their own (so they are read, not ignored).
pub const LEGACY: &[(&str, &str)] = &[
    ("CPUShares", "1024"),
    ("MemoryLimit", "\"1G\""),
    ("BlockIOWeight", "500"),
    ("BlockIODeviceWeight", "[\"{DISK} 500\"]"),
    ("BlockIOReadBandwidth", "[\"{DISK} 1M\"]"),
    ("BlockIOWriteBandwidth", "\"{DISK} 2M\""),
];

pub const SOCKET: &[(&str, &str)] = &[
    (
        "listen",
        "[\"127.0.0.1:8080\", \"unix:/run/bulkhead/app.sock\", \"[::1]:81\"]",
    ),
    ("mode", "\"proxy\""),
    ("backend", "\"127.0.0.1:8000\""),
    ("idle_timeout", "\"30s\""),
    ("ready", "\"connect\""),
    ("start_timeout", "\"10s\""),
    ("stop_timeout", "10"),
    ("connect_timeout", "\"250ms\""),
    ("max_connections", "100"),
    ("connection_idle_timeout", "\"1min\""),
    ("pipe_size", "\"1M\""),
    ("backlog", "128"),
    ("proxy_protocol", "\"v2\""),
    ("accept_proxy_protocol", "true"),
    ("socket_mode", "\"0660\""),
    ("socket_user", "\"root\""),
    ("socket_group", "\"root\""),
];

pub const TARGET: &[(&str, &str)] = &[
    (
        "command",
        "[\"/usr/bin/python3\", \"-m\", \"http.server\", \"8000\"]",
    ),
    ("rootfs", "\"app\""),
    ("slice", "\"db-helper\""),
    ("user", "\"nobody\""),
    ("group", "\"nogroup\""),
    ("working_directory", "\"/srv\""),
    ("environment", "{ PYTHONUNBUFFERED = \"1\" }"),
    ("network", "\"private\""),
    ("bind", "[\"/srv/data:/data:ro\"]"),
    ("snapshot", "\"auto\""),
];

pub const GUARD: &[(&str, &str)] = &[
    ("protect", "\"db-server\""),
    ("sideloads", "[\"db-helper\"]"),
    ("period", "\"100ms\""),
    ("calibration", "\"20s\""),
    ("cpu_floor", "\"5%\""),
    ("quota_period", "\"10ms\""),
    ("max_frozen", "\"2s\""),
    ("stall", "\"5%\""),
    ("io_keep", "\"40%\""),
    ("cpu_keep", "\"10%\""),
    ("keep_after", "\"5s\""),
    ("probe", "\"redis:127.0.0.1:6379\""),
];

pub const HUGEPAGES: &[(&str, &str)] = &[
    ("pools", "{ \"2M\" = \"64M\", \"1G\" = 0 }"),
    ("thp", "{ enabled = \"madvise\", defrag = \"defer\" }"),
    (
        "mount",
        "{ path = \"/dev/hugepages\", pagesize = \"2M\", size = \"50%\", mode = \"1770\" }",
    ),
];

/// The sections of the base plan, in file order: header and key = value lines.
pub fn sections() -> Vec<(String, Vec<(&'static str, &'static str)>)> {
    vec![
        ("[slice.db]".into(), vec![("AllowedCPUs", "\"0-1\"")]),
        ("[slice.db-server]".into(), DIRECTIVES.to_vec()),
        ("[slice.db-helper]".into(), LEGACY.to_vec()),
        ("[socket.app]".into(), SOCKET.to_vec()),
        ("[socket.app.target]".into(), TARGET.to_vec()),
        ("[guard]".into(), GUARD.to_vec()),
        ("[hugepages]".into(), HUGEPAGES.to_vec()),
    ]
}

/// One change to the base plan.
#[derive(Debug, Clone)]
pub enum Change {
    /// The value of key `key` of section `section` becomes `value` (TOML).
    Value {
        section: usize,
        key: usize,
        value: String,
    },
    /// The key is spelled `name` instead (a quoted TOML key).
    Key {
        section: usize,
        key: usize,
        name: String,
    },
    /// The section's name (after `slice.`/`socket.`) becomes `name`.
    Header { section: usize, name: String },
}

/// The base plan with one change: the text, and the line (1-based) the change is on.
pub fn render(change: &Change, disk: &str) -> (String, usize) {
    let mut out = String::new();
    let mut line = 0;
    let mut changed = 0;
    for (si, (header, keys)) in sections().into_iter().enumerate() {
        line += 1;
        match change {
            Change::Header { section, name } if *section == si => {
                let kind = header
                    .trim_matches(['[', ']'])
                    .split('.')
                    .next()
                    .unwrap_or("");
                let rest = header.trim_matches(['[', ']']).splitn(3, '.').nth(2);
                let mut h = format!("[{kind}.{}", toml_string(name));
                if let Some(r) = rest {
                    h.push('.');
                    h.push_str(r);
                }
                h.push(']');
                out.push_str(&h);
                changed = line;
            }
            _ => out.push_str(&header),
        }
        out.push('\n');
        for (ki, (k, v)) in keys.into_iter().enumerate() {
            line += 1;
            let (k, v) = match change {
                Change::Value {
                    section,
                    key,
                    value,
                } if *section == si && *key == ki => {
                    changed = line;
                    (k.to_string(), value.clone())
                }
                Change::Key { section, key, name } if *section == si && *key == ki => {
                    changed = line;
                    (toml_string(name), v.to_string())
                }
                _ => (k.to_string(), v.to_string()),
            };
            out.push_str(&format!("{k} = {}\n", v.replace("{DISK}", disk)));
        }
    }
    (out, changed)
}

/// The key a change is about, and its section's header.
pub fn changed_key(change: &Change) -> (String, String) {
    let s = sections();
    match change {
        Change::Value { section, key, .. } => {
            (s[*section].1[*key].0.to_string(), s[*section].0.clone())
        }
        Change::Key { section, name, .. } => (name.clone(), s[*section].0.clone()),
        Change::Header { section, name } => (name.clone(), s[*section].0.clone()),
    }
}

/// A TOML basic string holding exactly `s`.
pub fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Numbers as text, from the ordinary to the absurd.
pub fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u32..100_000).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        "[0-9]{15,40}",
        "[0-9]{0,3}\\.[0-9]{0,3}",
        prop::sample::select(vec![
            "18446744073709551615",
            "18446744073709551616",
            "9223372036854775807",
            "9223372036854775808",
            "4294967295",
            "4294967296",
            "99999999999999999999",
            "15.999999999999998",
            "15.999999999999999",
            "16383.999999999998",
            "0.9999999999999999",
            "1e308",
            "1e999",
            "NaN",
            "inf",
            "-inf",
            "-0",
            "-1",
            "0",
            "1",
            ".",
            "",
            "٣",
        ])
        .prop_map(str::to_string),
    ]
}

/// What a plan's string values look like, and what they should not.
pub fn text_value() -> impl Strategy<Value = String> {
    let suffix = prop::sample::select(vec![
        "", "B", "K", "M", "G", "T", "P", "E", "Z", "%", "ms", "us", "µs", "s", "min", "h", "d",
        "ns", "days", "KiB", " M", "%%",
    ]);
    prop_oneof![
        4 => (number(), suffix).prop_map(|(n, s)| format!("{n}{s}")),
        1 => prop::collection::vec((number(), prop::sample::select(vec!["ms", "s", "d", "min", ""])), 1..4)
            .prop_map(|v| v.into_iter().map(|(n, u)| format!("{n}{u}")).collect::<Vec<_>>().join(" ")),
        1 => prop::sample::select(vec![
            "infinity", "max", "idle", "", " ", "-", "-5%", "0%", "100%", "101%", "0-4294967295",
            "5-1", ",,", "0-65535", "yes", "no", "v1", "v2", "proxy", "pass", "per-connection",
            "notify", "connect", "auto", "btrfs", "host", "none", "/", "/dev/sda 10M",
            "8:0 10M", "/dev/null 0", "/dev/sda -1", "/dev/sda 99999999999999999999E",
            "unix:/run/x.sock", "unix:rel", "udp:127.0.0.1:53", "127.0.0.1:0", "[::1]:65536",
            "redis:127.0.0.1:6379", "tcp:[::1]:1", "0660", "07777", "17777", "db-helper",
            "db", "a--b", "-", "x.slice", "KEY=VALUE", "1=2", "/a:/b:ro", "/a:/b:xx", "::",
            "madvise", "never", "/dev/hugepages", "2M", "1G", "3M", "0K",
        ])
        .prop_map(str::to_string),
        1 => "[ -~]{0,30}",
        1 => "\\PC{0,20}",
        1 => any::<String>(),
        1 => "[0-9a-z/]{200,400}",
    ]
}

/// A TOML value: strings, numbers of every spelling, lists, inline tables, dates.
pub fn toml_value() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        6 => text_value().prop_map(|s| toml_string(&s)),
        1 => text_value().prop_map(|s| format!("'{}'", s.replace(['\'', '\n', '\r'], ""))),
        2 => any::<i64>().prop_map(|n| n.to_string()),
        1 => (0i64..100_000).prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec![
            "0", "-1", "1", "+1", "-0", "9223372036854775807", "-9223372036854775808",
            "9223372036854775808", "99999999999999999999", "999999999999999999999999999999999999999999",
            "0x7fffffffffffffff", "0xffffffffffffffff", "0o777", "0o7777", "0b101", "1_000_000",
            "1.5", "1e999", "-1e999", "1e-999", "nan", "+nan", "-nan", "inf", "+inf", "-inf",
            "0.0", "-0.0", "1.7976931348623157e308", "true", "false",
            "1979-05-27T07:32:00Z", "1979-05-27", "07:32:00",
        ])
        .prop_map(str::to_string),
        1 => any::<f64>().prop_filter("TOML spells these itself", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
    ];
    scalar.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(vec![
                            "value", "min", "max", "2M", "1G", "node0", "node1", "enabled",
                            "defrag", "path", "pagesize", "size", "mode", "PATH", "1M"
                        ])
                        .prop_map(toml_string),
                        "\\PC{0,6}".prop_map(|s| toml_string(&s)),
                    ],
                    inner
                ),
                0..4
            )
            .prop_map(|kv| {
                // Duplicate keys are a TOML error of their own; keep the first.
                let mut seen = std::collections::HashSet::new();
                let items: Vec<String> = kv
                    .into_iter()
                    .filter(|(k, _)| seen.insert(k.clone()))
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect();
                format!("{{ {} }}", items.join(", "))
            }),
        ]
    })
}

/// A key spelled wrong, or hostile.
pub fn key_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "cpuweight",
            "CPUWeigth",
            "MemoryMaxx",
            "memory_max",
            "listen ",
            "Listen",
            "idle-timeout",
            "idle_timeout_",
            "Protect",
            "pool",
            "",
            " ",
            "\u{0}",
            "CPUQuotaPeriodUSec",
        ])
        .prop_map(str::to_string),
        "[A-Za-z_]{1,20}",
        "\\PC{1,12}",
    ]
}

/// One change to the base plan: mostly a value, sometimes a key or a section name.
pub fn change() -> impl Strategy<Value = Change> {
    let secs = sections();
    let sizes: Vec<usize> = secs.iter().map(|s| s.1.len()).collect();
    let pick = (0..secs.len()).prop_flat_map(move |s| (Just(s), 0..sizes[s]));
    prop_oneof![
        8 => (pick.clone(), toml_value()).prop_map(|((section, key), value)| Change::Value {
            section,
            key,
            value
        }),
        1 => (pick, key_name()).prop_map(|((section, key), name)| Change::Key {
            section,
            key,
            name
        }),
        1 => (prop::sample::select(vec![0usize, 1, 2]), prop_oneof![
            text_value(),
            prop::sample::select(vec!["db", "db-server", "-", "a/b", "..", ".x", "a--b", "x.slice"])
                .prop_map(str::to_string)
        ])
        .prop_map(|(section, name)| Change::Header { section, name }),
    ]
}

/// Hosts from ordinary to extreme (no RAM, no task limit, huge pages).
pub fn host() -> impl Strategy<Value = Host> {
    (
        prop_oneof![
            Just(24u64 << 30),
            Just(0u64),
            Just(1u64),
            Just(u64::MAX),
            any::<u64>()
        ],
        prop_oneof![Just(1u32), Just(2), Just(64), 1u32..300],
        prop_oneof![
            Just(32768u64),
            Just(0),
            Just(1),
            Just(u64::MAX),
            any::<u64>()
        ],
        prop_oneof![Just(4096u64), Just(65536)],
    )
        .prop_map(|(memory, cpus, tasks_max, page_size)| {
            let mut h = Host {
                memory,
                cpus: IdSet((0..cpus).collect()),
                mem_nodes: IdSet([0].into_iter().collect()),
                hugepage_sizes: vec![2 << 20, 1 << 30],
                tasks_max,
                page_size,
                devices: Default::default(),
            };
            // The device argument the generated plans name, as a host lookup finds it.
            h.look_up_devices([disk().as_str()]);
            h
        })
}

/// Huge page facts for `memory` bytes of RAM.
pub fn facts(memory: u64) -> Facts {
    Facts {
        memory,
        page_sizes: vec![2 << 20, 1 << 30],
        default_size: 2 << 20,
        nodes: vec![0, 1],
        node_memory: vec![(0, memory / 2), (1, memory / 2)],
        pools: vec![
            Pool {
                size: 2 << 20,
                total: 16,
                ..Default::default()
            },
            Pool {
                size: 1 << 30,
                total: 1,
                ..Default::default()
            },
        ],
        thp: Thp {
            enabled: Some(Choice::parse("always [madvise] never")),
            defrag: Some(Choice::parse("always defer defer+madvise [madvise] never")),
            ..Default::default()
        },
        mounts: vec![],
    }
}

/// A slice whose every numeric directive is a generated number with its unit: reaches the
/// arithmetic of resolving and of the backends far more often than one change at a time.
pub fn numeric_slice() -> impl Strategy<Value = String> {
    let n = || {
        prop_oneof![
            number(),
            (0u32..2000).prop_map(|n| n.to_string()),
            prop::sample::select(vec!["1e5", "1e10", "1e11", "1e15", "1e300", "999999"])
                .prop_map(str::to_string),
        ]
    };
    let keys: Vec<(&'static str, &'static str)> = vec![
        ("CPUQuota", "%"),
        ("CPUQuotaPeriodSec", "ms"),
        ("CPUSchedulingSliceSec", "us"),
        ("CPUWeight", ""),
        ("MemoryMin", "M"),
        ("MemoryLow", "%"),
        ("MemoryHigh", "G"),
        ("MemoryMax", "E"),
        ("MemorySwapMax", "T"),
        ("TasksMax", "%"),
        ("IOWeight", ""),
    ];
    let values: Vec<_> = keys
        .iter()
        .map(|(_, unit)| {
            let unit = *unit;
            (
                n(),
                prop::sample::select(vec![unit, unit, "", "K", "%", "s", "E"]),
                any::<bool>(),
            )
                .prop_map(|(n, u, keep)| keep.then(|| toml_string(&format!("{n}{u}"))))
        })
        .collect();
    values.prop_map(move |vals| {
        let mut out = String::from("[slice.db]\n");
        for ((k, _), v) in keys.iter().zip(vals) {
            if let Some(v) = v {
                out.push_str(&format!("{k} = {v}\n"));
            }
        }
        out
    })
}
