//! Property test of what the backends make of plan input (issue 14: no input may panic): the
//! plan suite's changed plans (bulkhead-plan/tests/props/gen.rs) and slices of generated
//! numbers (quotas, periods, sizes, percentages), resolved against extreme
//! hosts, turned into every backend's writes as data: cgroupfs files on v1 and v2 (every
//! controller, with and without BFQ, swap and cpu.idle), systemd D-Bus properties and unit
//! files for systemd versions from 208 to the current one. Property: no panic (in debug and
//! in scripts/props' build, arithmetic that overflows panics instead of wrapping).
//!
//! `cargo test` runs a fast subset; `scripts/props` runs 100,000 cases.

#[path = "../../bulkhead-sys/tests/props/support.rs"]
mod support;

#[path = "../../bulkhead-plan/tests/props/gen.rs"]
mod gen;

use bulkhead_cgroups::fs::map::Mapper;
use bulkhead_cgroups::layout::{Caps, Version};
use bulkhead_cgroups::systemd::{export, slice_props::slice_props};
use bulkhead_plan::Plan;
use bulkhead_sys::units::IdSet;
use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;
use support::{check, ensure};

const SUITE: &str = "backends";
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/proptest-regressions/props_backends.txt"
);

fn disk() -> &'static str {
    static DISK: OnceLock<String> = OnceLock::new();
    DISK.get_or_init(gen::disk)
}

const CONTROLLERS: &[&str] = &["cpu", "cpuset", "memory", "io", "pids", "hugetlb"];
const SYSTEMD: &[u32] = &[208, 227, 231, 240, 244, 252, 999];

#[test]
fn backends_of_changed_plans() {
    check(
        SUITE,
        "plan -> cgroupfs writes, D-Bus properties, unit files",
        REGRESSIONS,
        (
            prop_oneof![
                gen::change().prop_map(|c| gen::render(&c, disk()).0),
                gen::numeric_slice(),
            ],
            gen::host(),
            any::<bool>(),
        ),
        |(text, host, caps_on)| {
            let Ok(plan) = Plan::parse(&text, Some(Path::new("p.toml"))) else {
                return Ok(()); // the plan suite checks refusals
            };
            let Ok(resolved) = plan.resolve(&host) else {
                return Ok(());
            };
            let caps = Caps {
                cpu_idle: caps_on,
                bfq: caps_on,
                bfq_devices: vec!["vda".into()],
                io_cost: !caps_on,
                memsw: caps_on,
                hugetlb_rsvd: caps_on,
                io_latency: caps_on,
                swap_v2: caps_on,
                bfq_module: caps_on,
                sched_ext: None,
                io_v2: !caps_on,
            };
            for s in &resolved.slices {
                for version in [Version::V1, Version::V2] {
                    let mut m = Mapper {
                        slice: s,
                        caps: &caps,
                        inherited_cpuset: (host.cpus.clone(), IdSet([0].into_iter().collect())),
                        swappiness: 60,
                        page_sizes: host.hugepage_sizes.clone(),
                        wants: vec![],
                        warnings: vec![],
                    };
                    for c in CONTROLLERS {
                        m.map(c, version);
                    }
                    ensure(!m.wants.is_empty(), || format!("no writes for {}", s.unit))?;
                }
                for v in SYSTEMD {
                    let _ = slice_props(s, *v);
                }
            }
            for v in SYSTEMD {
                let _ = export::unit_files(&plan, &host, *v);
            }
            Ok(())
        },
    );
}
