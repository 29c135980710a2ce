//! The runner every property suite shares (included with `#[path]` by the suites of
//! bulkhead-sys, bulkhead-plan, bulkhead-cgroups and bulkhead): how many cases, panics
//! counted apart from failed properties, and one line per property for `scripts/props`.
//!
//! Cases: `BULKHEAD_PROPTEST_CASES`, else proptest's own `PROPTEST_CASES`, else
//! [`CI_CASES`] (the fast subset `cargo test` runs). `scripts/props` sets 100000.

#![allow(dead_code)]

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Cases per property in an ordinary `cargo test` (debug): a few seconds per suite.
pub const CI_CASES: u32 = 2000;

/// Cases per property for this run.
pub fn cases() -> u32 {
    ["BULKHEAD_PROPTEST_CASES", "PROPTEST_CASES"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.trim().parse().ok())
        .unwrap_or(CI_CASES)
}

/// Run `property` over `cases()` values of `strategy`. A panic is caught, counted and
/// reported as a failure of its own (then shrunk like any other); `Err(why)` fails the
/// property. Prints `props[SUITE] NAME: cases=N panics=P time=Ss` (seen with --nocapture).
///
/// `regressions` is the suite's file of failing seeds (`CRATE/proptest-regressions/SUITE.txt`):
/// proptest writes every failure there and replays those seeds first on every later run.
pub fn check<S, F>(suite: &str, name: &str, regressions: &'static str, strategy: S, property: F)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
    F: Fn(S::Value) -> Result<(), String>,
{
    let n = cases();
    let config = Config {
        cases: n,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let ran = AtomicU64::new(0);
    let panics = AtomicU64::new(0);
    let start = Instant::now();
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy, |value| {
        ran.fetch_add(1, Ordering::Relaxed);
        match catch_unwind(AssertUnwindSafe(|| property(value))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(TestCaseError::fail(why)),
            Err(p) => {
                panics.fetch_add(1, Ordering::Relaxed);
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(no message)".into());
                Err(TestCaseError::fail(format!("PANIC: {msg}")))
            }
        }
    });
    println!(
        "props[{suite}] {name}: cases={} panics={} time={:.2}s",
        ran.load(Ordering::Relaxed),
        panics.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("props[{suite}] {name} failed: {e}");
    }
}

/// `Err(what)` unless `cond`.
pub fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}
