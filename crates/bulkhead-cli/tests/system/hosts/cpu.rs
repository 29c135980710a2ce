//! CPU: CPUWeight shares one CPU by ratio, CPUWeight=idle yields, CPUQuota caps. Usage comes
//! from the slice's own counter (cpu.stat usage_usec on v2, cpuacct.usage on v1), read over
//! a window in which all busy loops run.

use super::host::{ended, Host};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Busy loops in the slices (pinned to CPU 0 with `pin`), and the CPU time each slice got
/// per second of a `window` in which they all ran.
fn measure(h: &Host, slices: &[&str], pin: bool, window: Duration) -> Vec<f64> {
    // Each loop runs until its stdin is closed, after the window; the window opens once
    // every loop runs in its slice (`run` has exec'd it there and the slice's counter
    // moved), however slowly they start (an emulated guest, a busy host): neither end is a
    // fixed time.
    let op = format!("spin:{}:-", if pin { "0" } else { "-" });
    let zero: Vec<u64> = slices.iter().map(|s| h.cpu_usage_usec(s)).collect();
    let mut kids: Vec<_> = slices
        .iter()
        .map(|s| {
            h.child_in(s, &op)
                .stdin(Stdio::piped())
                .spawn()
                .expect("start the busy loop")
        })
        .collect();
    crate::common::wait_for("every busy loop running in its slice", || {
        kids.iter().all(|k| super::host::exec_done(k.id()))
            && slices
                .iter()
                .zip(&zero)
                .all(|(s, z)| h.cpu_usage_usec(s) > *z)
    });
    let t0 = Instant::now();
    let before: Vec<u64> = slices.iter().map(|s| h.cpu_usage_usec(s)).collect();
    std::thread::sleep(window);
    let after: Vec<u64> = slices.iter().map(|s| h.cpu_usage_usec(s)).collect();
    let wall = t0.elapsed().as_secs_f64();
    for k in &mut kids {
        drop(k.stdin.take());
        let st = k.wait().unwrap();
        assert!(st.success(), "busy loop: {}", ended(&st));
    }
    before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) as f64 / 1e6 / wall)
        .collect()
}

#[test]
fn cpu_weight_shares_one_cpu_by_ratio() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    h.apply(&[("light", "CPUWeight = 100"), ("heavy", "CPUWeight = 300")]);
    let got = measure(&h, &["light", "heavy"], true, Duration::from_secs(4));
    let ratio = got[1] / got[0];
    h.report(
        "CPUWeight",
        &format!(
            "100:300 on one CPU -> {:.2}:{:.2} CPU, ratio {ratio:.2} (want 3.00 +-15%)",
            got[0], got[1]
        ),
    );
    assert!(
        (ratio / 3.0 - 1.0).abs() <= 0.15,
        "CPUWeight 100:300 gave a ratio of {ratio:.2}"
    );
    assert!(got[0] + got[1] > 0.5, "the CPU was mostly idle: {got:?}");
}

#[test]
fn cpu_weight_idle_yields() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    h.apply(&[
        ("idle", "CPUWeight = \"idle\""),
        ("busy", "CPUWeight = 100"),
    ]);
    let got = measure(&h, &["idle", "busy"], true, Duration::from_secs(3));
    let share = got[0] / (got[0] + got[1]);
    h.report(
        "CPUWeight=idle",
        &format!(
            "idle vs 100 on one CPU -> {:.3}:{:.3} CPU, idle's share {:.1}% (want < 5%)",
            got[0],
            got[1],
            share * 100.0
        ),
    );
    assert!(share < 0.05, "an idle slice got {:.1}%", share * 100.0);
}

#[test]
fn cpu_quota_caps() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    h.apply(&[("capped", "CPUQuota = \"20%\"")]);
    let got = measure(&h, &["capped"], false, Duration::from_secs(3))[0];
    h.report(
        "CPUQuota",
        &format!("20% -> {:.1}% of a CPU (want 10-23%)", got * 100.0),
    );
    assert!(
        (0.10..=0.23).contains(&got),
        "CPUQuota=20% gave {:.1}%",
        got * 100.0
    );
}
