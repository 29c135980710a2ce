//! Memory: MemoryMax kills inside the slice and nowhere else, MemoryHigh reclaims (v2),
//! MemorySwapMax keeps a slice out of swap (with a swap file made for the check).

use super::host::{ended, killed, read_u64, stat_field, Host};
use std::path::{Path, PathBuf};

use std::process::Command;
use std::time::Duration;

/// OOM kills the kernel counted in the slice: memory.events (v2), memory.oom_control (v1).
fn oom_kills(h: &Host, name: &str) -> u64 {
    let d = h
        .dir("memory", name)
        .expect("the slice has a memory directory");
    if h.v2("memory") {
        stat_field(&d.join("memory.events"), "oom_kill").unwrap_or(0)
    } else {
        stat_field(&d.join("memory.oom_control"), "oom_kill").unwrap_or(0)
    }
}

/// This test binary as a child outside any slice of ours.
fn outside(op: &str) -> std::process::ExitStatus {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "hosts::child::child", "--ignored", "--nocapture"])
        .env("BH_CHILD", op)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
}

#[test]
fn memory_max_kills_inside_the_slice_only() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    h.apply(&[("small", "MemoryMax = \"64M\"\nMemorySwapMax = 0")]);
    let st = h.child_in("small", "alloc:200:0").status().unwrap();
    let kills = oom_kills(&h, "small");
    let out = outside("alloc:200:0");
    h.report(
        "MemoryMax",
        &format!(
            "64M, 200 MiB touched -> {} in the slice ({kills} oom_kill), outside: {}",
            ended(&st),
            ended(&out)
        ),
    );
    assert!(
        killed(&st),
        "a 200 MiB process in a 64M slice: {}",
        ended(&st)
    );
    // v1 counts a kill only in the victim's own cgroup: under systemd that is the scope
    // `run --scope` made in the slice, gone by now. v2's memory.events is hierarchical.
    if h.v2("memory") || !h.systemd {
        assert!(kills >= 1, "no oom_kill counted in the slice");
    }
    assert!(out.success(), "outside the slice: {}", ended(&out));
}

#[test]
fn memory_high_reclaims_on_v2() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let said = h.apply(&[("high", "MemoryHigh = \"32M\"")]);
    if !h.v2("memory") {
        h.report("MemoryHigh", "not on v1: apply warns, nothing is enforced");
        assert!(
            said.contains("has no memory.high")
                || said.contains("MemoryHigh is recorded but not enforced"),
            "apply said: {said}"
        );
        return;
    }
    let scratch = h.tmp().to_path_buf();
    let file = scratch.join("cache");
    // 128 MiB through the page cache, written back: the slice stays near its high mark.
    let st = h
        .run_in(
            "high",
            &[
                "dd",
                "if=/dev/zero",
                &format!("of={}", file.display()),
                "bs=1M",
                "count=128",
                "conv=fsync",
                "status=none",
            ],
        )
        .status()
        .unwrap();
    let d = h.dir("memory", "high").unwrap();
    let high = stat_field(&d.join("memory.events"), "high").unwrap_or(0);
    let peak = std::fs::read_to_string(d.join("memory.peak"))
        .ok()
        .and_then(|p| p.trim().parse::<u64>().ok());
    let current = read_u64(&d.join("memory.current"));
    h.report(
        "MemoryHigh",
        &format!(
            "32M, 128 MiB written through the page cache -> {} high events, peak {}, now {} MiB ({})",
            high,
            peak.map_or("n/a".into(), |p| format!("{} MiB", p >> 20)),
            current >> 20,
            ended(&st)
        ),
    );
    assert!(st.success(), "dd in a MemoryHigh slice: {}", ended(&st));
    assert!(high > 0, "no memory.high event");
    assert!(
        current <= 40 << 20,
        "memory.current {current} above 32M high"
    );
}

#[test]
fn memory_swap_max_keeps_a_slice_out_of_swap() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let scratch = h.tmp().to_path_buf();
    let swap = match Swap::on(&scratch.join("swapfile"), 512) {
        Ok(s) => s,
        Err(why) => {
            h.report(
                "MemorySwapMax",
                &format!("not checked: no swap file here ({why})"),
            );
            assert!(!in_guest(), "the vmhost guest must take a swap file: {why}");
            return;
        }
    };
    let said = h.apply(&[
        ("noswap", "MemoryMax = \"64M\"\nMemorySwapMax = 0"),
        ("swap", "MemoryMax = \"64M\"\nMemorySwapMax = \"512M\""),
    ]);
    if said.contains("MemorySwapMax is recorded but not enforced") {
        h.report(
            "MemorySwapMax",
            "not enforced by systemd with memory on v1: apply warns",
        );
        assert!(h.systemd && !h.v2("memory"), "apply said: {said}");
        return;
    }
    if said.contains("swap accounting is off") {
        h.report(
            "MemorySwapMax",
            "not enforced: swap accounting is off (no memory.memsw.*)",
        );
        return;
    }
    let st0 = h.child_in("noswap", "alloc:128:0").status().unwrap();
    // It holds its memory until the check closes its stdin: once 32 MiB of it is in swap,
    // or after a minute (an emulated guest allocates slowly; no lifetime fixed in advance).
    let mut kid = h
        .child_in("swap", "alloc:128:-")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The most it had in swap while it lived.
    let mut swapped = 0;
    let t0 = std::time::Instant::now();
    let st1 = loop {
        if let Some(st) = kid.try_wait().unwrap() {
            break st;
        }
        swapped = swapped.max(swap_used(&h, "swap"));
        if swapped >= 32 << 20 || t0.elapsed() > Duration::from_secs(60) {
            drop(kid.stdin.take());
            break kid.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(swap);
    h.report(
        "MemorySwapMax",
        &format!(
            "MemoryMax 64M, 128 MiB touched -> with MemorySwapMax=0: {}; with 512M: {}, {} MiB in swap",
            ended(&st0),
            ended(&st1),
            swapped >> 20
        ),
    );
    assert!(killed(&st0), "MemorySwapMax=0: {}", ended(&st0));
    assert!(st1.success(), "MemorySwapMax=512M: {}", ended(&st1));
    assert!(swapped >= 32 << 20, "only {swapped} bytes swapped");
}

/// Bytes of the slice in swap: memory.swap.current (v2), memsw - mem usage (v1).
fn swap_used(h: &Host, name: &str) -> u64 {
    let d = h.dir("memory", name).unwrap();
    if h.v2("memory") {
        read_u64(&d.join("memory.swap.current"))
    } else {
        read_u64(&d.join("memory.memsw.usage_in_bytes"))
            .saturating_sub(read_u64(&d.join("memory.usage_in_bytes")))
    }
}

/// Running inside a `scripts/vmhost` guest.
pub fn in_guest() -> bool {
    std::fs::read_to_string("/proc/cmdline").is_ok_and(|c| c.contains("vmhost.cgroup="))
}

/// A swap file, on for the check and off (and removed) when dropped.
struct Swap(PathBuf);

impl Swap {
    fn on(path: &Path, mib: u64) -> Result<Swap, String> {
        let sh = |args: &[&str]| -> Result<(), String> {
            let o = Command::new(args[0])
                .args(&args[1..])
                .output()
                .map_err(|e| format!("{}: {e}", args[0]))?;
            if o.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
        };
        let p = path.to_str().unwrap();
        let swap = Swap(path.to_path_buf());
        sh(&[
            "dd",
            "if=/dev/zero",
            &format!("of={p}"),
            "bs=1M",
            &format!("count={mib}"),
            "status=none",
        ])?;
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        sh(&["mkswap", "-q", p])?;
        sh(&["swapon", p])?;
        Ok(swap)
    }
}

impl Drop for Swap {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg(&self.0).status();
        let _ = std::fs::remove_file(&self.0);
    }
}
