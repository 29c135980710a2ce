use super::*;
use bulkhead_sys::host::Host;
use bulkhead_sys::units::{IdSet, Limit};

/// A host with the device arguments these tests name looked up on this machine.
fn host() -> Host {
    let mut h = Host {
        memory: 24 << 30,
        cpus: IdSet::parse("0-1").unwrap(),
        mem_nodes: IdSet::parse("0").unwrap(),
        hugepage_sizes: vec![2 << 20, 1 << 30],
        tasks_max: 32768,
        page_size: 4096,
        devices: Default::default(),
    };
    h.look_up_devices(["/", "/tmp"]);
    h
}

fn err(text: &str) -> String {
    match Plan::parse(text, Some(Path::new("p.toml"))).and_then(|p| p.resolve(&host())) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => {
            assert_eq!(e.exit_code(), 2, "bad input exits 2");
            e.to_string()
        }
    }
}

#[test]
fn default_plan_resolves_with_floors() {
    let plan = Plan::parse(EMBEDDED_DEFAULT, None).unwrap();
    let r = plan.resolve(&host()).unwrap();
    let names: Vec<_> = r.slices.iter().map(|s| s.name().to_string()).collect();
    assert_eq!(names, ["db", "db-helper", "db-monitor", "db-server"]);
    // Monitoring agents: a weight, not idle (issue 43), capped at half a CPU and 512M.
    let monitor = r.slice(&SliceName::parse("db-monitor").unwrap()).unwrap();
    assert_eq!(monitor.cpu_weight, Some(CpuWeight::Weight(100)));
    let quota = monitor.cpu_max.unwrap();
    assert_eq!(quota.quota_us * 2, quota.period_us, "{quota:?}");
    assert_eq!(monitor.memory_max, Some(Limit::Bytes(512 << 20)));
    let helper = r.slice(&SliceName::parse("db-helper").unwrap()).unwrap();
    // 4% of 24G = 983M is below the 1200M floor.
    assert_eq!(helper.memory_high, Some(Limit::Bytes(1200 << 20)));
    assert_eq!(helper.memory_max, Some(Limit::Bytes(1400 << 20)));
    // On a 64G host the percentages win.
    let mut big = host();
    big.memory = 64 << 30;
    let r = plan.resolve(&big).unwrap();
    let helper = r.slice(&SliceName::parse("db-helper").unwrap()).unwrap();
    let four_pct = (64u64 << 30) as f64 * 0.04;
    assert_eq!(
        helper.memory_high,
        Some(Limit::Bytes(four_pct as u64 / 4096 * 4096))
    );
}

#[test]
fn implicit_parent_is_created_and_said() {
    let plan = Plan::parse("[slice.db-server]\nCPUWeight = 1000\n", None).unwrap();
    assert!(plan.slices[&SliceName::parse("db").unwrap()].implicit());
    assert!(plan
        .notes
        .iter()
        .any(|n| n.message.contains("'db' is not in the plan")));
}

#[test]
fn unknown_directive_suggests() {
    let e = err("[slice.db]\nMemoryMaxx = \"1G\"\n");
    assert!(e.contains("p.toml:2:1"), "{e}");
    assert!(e.contains("unknown directive 'MemoryMaxx'"), "{e}");
    assert!(e.contains("did you mean MemoryMax?"), "{e}");
    let e = err("[slice.db]\ncpuweight = 10\n");
    assert!(e.contains("did you mean CPUWeight?"), "{e}");
}

#[test]
fn out_of_range_values() {
    assert!(err("[slice.db]\nCPUWeight = 0\n").contains("out of range"));
    assert!(err("[slice.db]\nCPUWeight = 10001\n").contains("1..10000"));
    assert!(err("[slice.db]\nIOWeight = 20000\n").contains("from 1 to 10000"));
    let e = err("[slice.db]\nMemoryMax = \"110%\"\n");
    assert!(e.contains("more than 100% of RAM"), "{e}");
    assert!(e.contains("[slice.db]"), "{e}");
    assert!(err("[slice.db]\nMemoryMax = -5\n").contains("negative"));
    assert!(err("[slice.db]\nAllowedCPUs = \"0-7\"\n").contains("online CPUs are 0-1"));
    assert!(err("[slice.db]\nCPUQuota = \"0.5%\"\n").contains("1ms minimum"));
    // Issue 14: the backends multiply the quota; "1e300%" overflowed them.
    for huge in ["1e300%", "1000001%", "inf%"] {
        let e = err(&format!("[slice.db]\nCPUQuota = \"{huge}\"\n"));
        assert!(e.contains("p.toml:2:1") && e.contains("CPUQuota"), "{e}");
    }
    assert!(err("[slice.db]\nHugetlbMax = { \"4M\" = \"1G\" }\n").contains("no 4M huge pages"));
    assert!(err("[slice.db]\nTasksMax = 0\n").contains("forbid every process"));
}

#[test]
fn bad_names() {
    assert!(err("[slice.\"a/b\"]\n").contains("contains '/'"));
    assert!(err("[slice.\"a..b\"]\n").contains("'..'"));
    assert!(err("[slice.\"db--x\"]\n").contains("empty part"));
}

#[test]
fn syntax_errors_have_line_and_column() {
    let e = err("[slice.db]\nCPUWeight = = 3\n");
    assert!(e.contains("p.toml:2:"), "{e}");
    assert!(e.contains("TOML syntax error"), "{e}");
    // The error quotes what it is about (issue 14: a refusal names what was wrong).
    // A size without quotes: the hint says how to write it (issue 28).
    let e = err("[slice.db]\nCPUWeight = 10\nMemoryMax = 1.5G # budget\n");
    assert!(e.contains("p.toml:3:"), "{e}");
    assert!(
        e.contains("hint: sizes, percentages, durations and words are strings in TOML: write MemoryMax = \"1.5G\""),
        "{e}"
    );
    let e = err("[slice.db]\nCPUQuota = 50%\n");
    assert!(e.contains("write CPUQuota = \"50%\""), "{e}");
    let e = err("[slice.db]\nCPUWeight = = 3\n");
    assert!(e.contains("see https://toml.io"), "{e}");
    let e = err("[slice.db]\nCPUWeight = 1\n[slice.\"db\"]\n");
    assert!(
        e.contains("p.toml:3:") && e.contains("duplicate key: `\"db\"`"),
        "{e}"
    );
}

#[test]
fn unknown_section() {
    let e = err("[slices.db]\nCPUWeight = 3\n");
    assert!(e.contains("unknown section 'slices'"), "{e}");
    assert!(e.contains("did you mean [slice.NAME]"), "{e}");
}

#[test]
fn child_cpuset_must_narrow_parent() {
    let e = err("[slice.db]\nAllowedCPUs = \"0\"\n[slice.db-server]\nAllowedCPUs = \"0-1\"\n");
    assert!(e.contains("not inside the parent slice db"), "{e}");
}

#[test]
fn all_directives_resolve() {
    let text = r#"
[slice.db]
CPUWeight = "idle"
CPUQuota = "150%"
CPUQuotaPeriodSec = "50ms"
AllowedCPUs = "0-1"
AllowedMemoryNodes = "0"
MemoryMin = "64M"
MemoryLow = "128M"
MemoryHigh = "1G"
MemoryMax = "2G"
MemorySwapMax = 0
IOWeight = 50
IODeviceWeight = "/ 300"
IOReadBandwidthMax = "/ 10M"
IOWriteBandwidthMax = ["/ 5M"]
IOReadIOPSMax = "/ 1000"
IOWriteIOPSMax = "/ infinity"
IODeviceLatencyTargetSec = ["/ 10ms", "/tmp 250us"]
TasksMax = "10%"
HugetlbMax = { "2M" = "1G" }
"#;
    let r = Plan::parse(text, None).unwrap().resolve(&host()).unwrap();
    let s = &r.slices[0];
    assert_eq!(s.cpu_weight, Some(CpuWeight::Idle));
    assert_eq!(
        s.cpu_max,
        Some(CpuMax {
            quota_us: 75000,
            period_us: 50000
        })
    );
    assert_eq!(s.memory_swap_max, Some(Limit::Bytes(0)));
    assert_eq!(s.tasks_max, Some(Limit::Bytes(3276)));
    assert_eq!(s.hugetlb_max[&(2 << 20)], Limit::Bytes(1 << 30));
    let io = s.io_max.values().next().unwrap();
    assert_eq!(io.rbps, Some(Limit::Bytes(10_000_000)));
    assert_eq!(io.wiops, Some(Limit::Infinity));
    assert_eq!(s.io_device_weight.values().next(), Some(&300));
    // "/" and "/tmp" are on one disk here: the later entry wins, as in systemd.
    assert_eq!(s.io_latency.values().last(), Some(&Some(250)));
}

#[test]
fn device_latency_targets() {
    let r = Plan::parse(
        "[slice.db]\nIODeviceLatencyTargetSec = [\"/ 2.5ms\"]\n[slice.x]\nIODeviceLatencyTargetSec = \"/ infinity\"\n",
        None,
    )
    .unwrap()
    .resolve(&host())
    .unwrap();
    let disk = host().devices["/"].clone().unwrap().dev;
    let db = r.slice(&SliceName::parse("db").unwrap()).unwrap();
    assert_eq!(db.io_latency[&disk], Some(2500));
    assert_eq!(db.device_paths[&disk], "/");
    let set = db
        .settings
        .iter()
        .find(|s| s.directive == "IODeviceLatencyTargetSec")
        .unwrap();
    assert_eq!(set.value, format!("{disk} 2500us"));
    assert_eq!(set.toml, "\"/ 2500us\"");
    assert!(
        set.from
            .as_deref()
            .unwrap()
            .starts_with(&format!("device {disk}: / on ")),
        "{set:?}"
    );
    let x = r.slice(&SliceName::parse("x").unwrap()).unwrap();
    assert_eq!(x.io_latency[&disk], None);
    for (bad, want) in [
        ("\"/ 0\"", "a target of 0 sets no target"),
        ("\"/ soon\"", "not a time span"),
        ("\"10ms\"", "is not \"DEVICE VALUE\""),
        ("\"dev/vda 10ms\"", "not an absolute path"),
        ("\"/var//lib 10ms\"", "not a normalized path"),
        ("5", "expected \"DEVICE VALUE\""),
    ] {
        let e = err(&format!("[slice.db]\nIODeviceLatencyTargetSec = {bad}\n"));
        assert!(e.contains(want), "{bad}: {e}");
        assert!(e.contains("p.toml:2"), "{bad}: {e}");
    }
}

/// A device argument that leads to no disk is an error at the directive, saying why and
/// what to name instead (the host facts hold the answer; resolving reads nothing).
#[test]
fn device_arguments_that_lead_nowhere() {
    let text = "[slice.db]\nIOReadBandwidthMax = \"/proc 10M\"\nIODeviceWeight = \"/nope 200\"\n";
    let plan = Plan::parse(text, Some(Path::new("p.toml"))).unwrap();
    assert_eq!(plan.device_paths(), ["/nope", "/proc"]);
    let mut h = host();
    h.look_up_devices(plan.device_paths());
    let e = plan.resolve(&h).unwrap_err().to_string();
    assert!(
        e.contains("p.toml:2:1") && e.contains("IOReadBandwidthMax = \"/proc 10M\""),
        "{e}"
    );
    assert!(e.contains("no block device behind it"), "{e}");
    assert!(
        e.contains("p.toml:3:1") && e.contains("cannot open '/nope'"),
        "{e}"
    );
    assert!(e.contains("a path on its file system"), "{e}");
    // Resolving without the facts says so instead of reading the disk.
    let e = plan
        .resolve(&Host {
            devices: Default::default(),
            ..host()
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("was not looked up"), "{e}");
}

#[test]
fn legacy_directives_convert() {
    let p = Plan::parse("[slice.x]\nCPUShares = 2048\nMemoryLimit = \"1G\"\n", None).unwrap();
    let s = &p.slices[&SliceName::parse("x").unwrap()];
    assert_eq!(
        s.directives["CPUWeight"].value,
        Value::CpuWeight(CpuWeight::Weight(200))
    );
    assert!(s.directives.contains_key("MemoryMax"));
    assert!(p.notes.iter().any(|n| n.message.contains("deprecated")));
}

#[test]
fn missing_plan_file() {
    let e = Plan::load(Some(Path::new("/nonexistent/bulkhead.toml"))).unwrap_err();
    let s = e.to_string();
    assert!(s.contains("/nonexistent/bulkhead.toml"), "{s}");
    assert!(s.contains("No such file"), "{s}");
}
