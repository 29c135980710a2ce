//! Counted limits: TasksMax stops forks, AllowedCPUs pins, HugetlbMax refuses huge pages over
//! the limit, and PSI is there per slice (where a cgroup2 mount holds the slice).

use super::host::{ended, read_u64, stat_field, Host};
use std::path::Path;
use std::process::Stdio;

#[test]
fn tasks_max_stops_forks() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    h.apply(&[("few", "TasksMax = 8")]);
    let o = h
        .child_in("few", "spawn:20")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let d = h
        .dir("pids", "few")
        .expect("the slice has a pids directory");
    let refused = stat_field(&d.join("pids.events"), "max").unwrap_or(0);
    h.report(
        "TasksMax",
        &format!("8, 20 processes started at once -> {said} (pids.events max {refused})"),
    );
    assert!(o.status.success(), "{}", ended(&o.status));
    let started: u32 = said
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(99);
    assert!(
        started <= 7,
        "TasksMax=8 let {started} children start: {said}"
    );
    // pids.events counts where the fork failed: in the slice, or (6.1, systemd) the scope in it.
    assert!(
        said.contains("refused") && !said.starts_with("20 "),
        "{said}"
    );
}

#[test]
fn allowed_cpus_pins() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        h.report("AllowedCPUs", "not checked: one CPU");
        return;
    }
    let said = h.apply(&[("pinned", "AllowedCPUs = \"1\"")]);
    if h.systemd && !h.v2("cpuset") {
        h.report(
            "AllowedCPUs",
            "not enforced by systemd with cpuset on v1: apply warns",
        );
        assert!(
            said.contains("AllowedCPUs/AllowedMemoryNodes are recorded but not enforced"),
            "{said}"
        );
        return;
    }
    let o = h
        .child_in("pinned", "cpus")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&o.stderr)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    h.report(
        "AllowedCPUs",
        &format!("1 -> the command may run on CPUs {got}"),
    );
    assert!(o.status.success(), "{}", ended(&o.status));
    assert_eq!(got, "1", "AllowedCPUs=1 (apply said: {said})");
}

/// The 2 MiB pool, grown for the check and put back when dropped.
struct Pool {
    file: &'static str,
    before: u64,
}

impl Pool {
    fn grow(by: u64) -> Option<Pool> {
        let file = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
        let before = read_u64(Path::new(file));
        std::fs::write(file, (before + by).to_string()).ok()?;
        let pool = Pool { file, before };
        (read_u64(Path::new(file)) == before + by).then_some(pool)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = std::fs::write(self.file, self.before.to_string());
    }
}

#[test]
fn hugetlb_max_refuses_pages_over_the_limit() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let said = h.apply(&[("huge", "HugetlbMax = { \"2M\" = \"2M\" }")]);
    if h.systemd {
        h.report(
            "HugetlbMax",
            "not applied by the systemd backend (systemd has no hugetlb directive): apply warns",
        );
        assert!(
            said.contains("HugetlbMax is not applied"),
            "apply said: {said}"
        );
        return;
    }
    if h.dir("hugetlb", "huge").is_none() {
        h.report(
            "HugetlbMax",
            &format!(
                "not enforced: no hugetlb cgroup for the slice ({})",
                said.trim()
            ),
        );
        return;
    }
    let _pool = Pool::grow(4).expect("reserve four 2 MiB pages");
    let one = h.child_in("huge", "hugetlb:2").status().unwrap();
    let two = h.child_in("huge", "hugetlb:4").status().unwrap();
    h.report(
        "HugetlbMax",
        &format!(
            "2M: one 2 MiB page -> {}, two pages -> {} (3: mmap refused, signal 7: fault refused)",
            ended(&one),
            ended(&two)
        ),
    );
    assert!(one.success(), "one page under a 2M limit: {}", ended(&one));
    assert!(!two.success(), "two pages under a 2M limit were given");
}

#[test]
fn pressure_is_measured_per_slice() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    h.apply(&[("starved", "CPUQuota = \"10%\"")]);
    let Some(d) = h.unified_dir("starved") else {
        h.report(
            "PSI",
            "not per slice: the slice has no cgroup2 directory (v1 only)",
        );
        assert!(
            h.layout.unified.is_none(),
            "a unified mount but no directory for the slice"
        );
        return;
    };
    let total = |d: &Path| stat_psi_total(&d.join("cpu.pressure"));
    let before = total(&d);
    let st = h.child_in("starved", "spin:-:2").status().unwrap();
    let after = total(&d);
    let stalled = after.saturating_sub(before);
    let status = h.bulkhead(&["status", "--json"]);
    h.report(
        "PSI",
        &format!(
            "CPUQuota 10%, 2 s busy -> cpu.pressure some total +{:.2} s",
            stalled as f64 / 1e6
        ),
    );
    assert!(st.success(), "{}", ended(&st));
    assert!(
        stalled >= 500_000,
        "only {stalled} us of CPU pressure in a 10% slice"
    );
    assert!(status.status.success(), "status --json");
}

/// `some ... total=N` of a pressure file.
fn stat_psi_total(p: &Path) -> u64 {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .find(|l| l.starts_with("some "))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("total=")?.parse().ok())
        })
        .unwrap_or(0)
}
