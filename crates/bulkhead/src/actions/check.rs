//! `check`: is protection in force? Reads the plan, what `apply --dry-run` would change, every
//! process's cgroup and the host's THP, swap and disks, and hands them to `crate::check`
//! for one verdict (0 protected, 1 degraded, 2 not protected, 3 unknown).

use super::apply::{self, ApplyPlan, ApplyRequest};
use super::Context;
use crate::check::drift::{self, Planned};
use crate::check::host::{self, DataDisk, Facts, Wants};
use crate::check::placement::{self, Claim, Expected, Role, Roles, SliceDirs};
use crate::check::verdict::{Area, Finding, Level};
pub use crate::check::verdict::{Area as CheckArea, Level as CheckLevel, State};
pub use crate::check::Report;
use bulkhead_cgroups::{iocost, Chosen, ChosenOp, Placement};
use bulkhead_plan::{CpuWeight, Plan, ResolvedPlan, SliceName};
use bulkhead_sys::host::{self as hostfacts, DevNum, Host};
use bulkhead_sys::procs;
use bulkhead_sys::units::Limit;
use std::path::Path;
use std::time::{Duration, Instant};

/// The most server processes whose disks are looked up (PostgreSQL runs one per connection;
/// they share the data directory).
const DISK_LOOKUPS: usize = 16;

/// The walk of /proc stops after this long, with an UNKNOWN "incomplete" finding: a host
/// with tens of thousands of processes (of any user) never holds a check, or a scrape, up.
const SCAN_FOR: Duration = Duration::from_secs(10);

/// What the walk could not cover.
fn scan_findings(scan: &crate::place::claims::Scan) -> Vec<Finding> {
    let mut out = Vec::new();
    if scan.truncated {
        out.push(Finding::new(
            Area::Access,
            Level::Unknown,
            format!(
                "more than {} processes: the rest were not checked",
                procs::MAX_PROCS
            ),
        ));
    }
    for (what, file, why) in &scan.unread {
        out.push(
            Finding::new(
                Area::Access,
                Level::Unknown,
                format!("{what}: its pidfile {file} cannot be used ({why}): where its processes are was not checked"),
            )
            .hint(if bulkhead_sys::process::is_root() {
                "see why above: a pidfile is used only if root or the service's user owns it and its directory".to_string()
            } else {
                "run it as root: sudo bulkhead check".to_string()
            }),
        );
    }
    if scan.incomplete {
        out.push(
            Finding::new(
                Area::Access,
                Level::Unknown,
                format!(
                    "incomplete: the walk of /proc stopped after {} s ({} processes read); the rest were not checked",
                    SCAN_FOR.as_secs(),
                    scan.read
                ),
            )
            .hint("a host this busy is checked in part: run check again, or look for who starts so many processes"),
        );
    }
    out
}

/// Check everything once. Never fails: what cannot be read is an UNKNOWN finding.
pub fn check(cx: &Context) -> Report {
    let plan = match cx.load_plan() {
        Ok(p) => p,
        Err(e) => return cannot("the plan cannot be read", &e),
    };
    let source = plan.source.label();
    let chosen = match cx.choose() {
        Ok(c) => c,
        Err(e) => return cannot("the cgroup layout cannot be read", &e),
    };
    let resolved = match plan.resolve(&Host::detect_for(plan.device_paths())) {
        Ok(r) => r,
        Err(e) => return cannot("the plan cannot be resolved on this host", &e),
    };
    let mut findings = Vec::new();
    findings.extend(plan_findings(cx));
    let roles = Roles::of(&plan);
    let by = {
        let l = &chosen.reader().layout;
        l.hierarchy("cpu").or_else(|| l.primary())
    };
    // The plan's own placements (its services and rules, with the processes each claims
    // now) and the known servers and helpers: one streaming walk of /proc, bounded in time.
    let rules = match crate::place::rules::compile(&plan) {
        Ok(r) => r,
        Err(e) => {
            let why = e
                .diagnostics()
                .first()
                .map(ToString::to_string)
                .unwrap_or_default();
            findings.push(Finding::new(
                Area::Access,
                Level::Unknown,
                format!("the placement rules were not checked: {why}"),
            ));
            Vec::new()
        }
    };
    let want = |p: &procs::Proc| placement::known_name(&p.comm);
    let scan = crate::place::claims::scan(&plan, &rules, &want, Instant::now() + SCAN_FOR);
    findings.extend(scan_findings(&scan));
    let io_workers = scan
        .procs
        .iter()
        .filter(|p| {
            p.comm == "postgres"
                && placement::vouched(p)
                && crate::check::backends::is_io_worker(&p.cmdline)
        })
        .count();
    let procs: Vec<placement::ProcEntry> = scan.procs.into_iter().map(Into::into).collect();
    findings.extend(backend_rules(&plan, &scan.claims, &procs, io_workers));
    let unread = scan.unread;
    let claims: Vec<Claim> = scan
        .claims
        .into_iter()
        // A service whose pidfile could not be read claims nothing known (an UNKNOWN finding).
        .filter(|(what, _, _)| !unread.iter().any(|u| &u.0 == what))
        .map(|(what, slice, pids)| Claim {
            what,
            role: if roles.server.contains(&slice) {
                Role::Server
            } else {
                Role::Helper
            },
            slices: vec![slice],
            pids,
        })
        .collect();
    let named = roles
        .server
        .iter()
        .chain(&roles.helper)
        .chain(&roles.monitor)
        .chain(claims.iter().flat_map(|c| &c.slices));
    let dirs = slice_dirs(&chosen, named);
    let placements = placement::expected(&procs, &claims, &roles, &dirs, by);
    findings.extend(placement::findings(&placements));
    let idle: Vec<String> = resolved
        .slices
        .iter()
        .filter(|s| s.cpu_weight == Some(CpuWeight::Idle))
        .map(|s| s.name().to_string())
        .collect();
    findings.extend(crate::check::monitor::starved(&placements, &idle));
    findings.extend(crate::check::placer::finding(
        &placer(cx, &plan),
        place_needed(&plan, &chosen).as_deref(),
    ));
    let facts = facts(&chosen, &placements);
    findings.extend(host::findings(
        &facts,
        &wants(&plan, &resolved, &roles),
        &placements,
    ));
    if let Some(c) = &plan.check {
        crate::check::verdict::accept(&mut findings, |a| c.accepts(a.name()).map(str::to_string));
    }
    Report::new(
        source,
        chosen.name().into(),
        findings,
        placements,
        facts.disks,
    )
}

/// The plan's rules for PostgreSQL's backends: idle while a dump runs, or placing backends
/// whose reads PostgreSQL 18's I/O workers do in the server's slice.
fn backend_rules(
    plan: &Plan,
    claims: &[crate::place::claims::Claimed],
    procs: &[placement::ProcEntry],
    io_workers: usize,
) -> Vec<Finding> {
    use crate::check::backends::{self, BackendRule};
    let rules: Vec<BackendRule<'_>> = plan
        .place
        .values()
        .map(|r| BackendRule {
            name: &r.name,
            slice: r.slice.as_str(),
            cmdline: &r.cmdline,
            claimed: claims
                .iter()
                .find(|c| c.0 == format!("rule {}", r.name))
                .map_or(0, |c| c.2.len()),
        })
        .collect();
    let dumps: Vec<(String, u32)> = procs
        .iter()
        .filter(|p| backends::DUMPS.contains(&p.comm.as_str()))
        .map(|p| (p.comm.clone(), p.pid))
        .collect();
    let mut out = backends::findings(&rules, &dumps);
    out.extend(backends::reads_in_workers(&rules, io_workers));
    out
}

/// What only a running `place` does for this plan (its rules; its services with pidfiles
/// where no systemd attaches them), said for the finding; None: nothing.
fn place_needed(plan: &Plan, chosen: &Chosen) -> Option<String> {
    let rules = plan.place.len();
    let services = if chosen.attaches_services() {
        0
    } else {
        bulkhead_plan::services::with_pidfiles(plan).len()
    };
    let mut parts = Vec::new();
    if rules > 0 {
        parts.push(format!("{rules} placement rule(s)"));
    }
    if services > 0 {
        parts.push(format!("{services} service(s) placed by pidfile"));
    }
    (!parts.is_empty()).then(|| parts.join(" and "))
}

/// `place`'s state file for this cgroup root, against the plan `check` read.
fn placer(cx: &Context, plan: &Plan) -> crate::check::placer::Placer {
    use crate::check::placer::Placer;
    use crate::place::state;
    let Some(s) = state::read(&state::file(&cx.cgroup_root)) else {
        return Placer::Missing;
    };
    if !state::alive(&s) {
        return Placer::Gone { pid: s.pid };
    }
    let age = state::now_secs().saturating_sub(s.heartbeat);
    if age > state::STALE.as_secs() {
        return Placer::Stale { pid: s.pid, age };
    }
    Placer::Running {
        pid: s.pid,
        same_plan: s.digest == state::digest(&plan.source.text),
        plan: s.plan,
    }
}

fn cannot(what: &str, e: &bulkhead_sys::error::Error) -> Report {
    let d = e.diagnostics();
    let why = d
        .iter()
        .map(|d| d.message.clone())
        .collect::<Vec<_>>()
        .join("; ");
    let hint = d.iter().find_map(|d| d.hint.clone());
    Report::cannot(String::new(), format!("{what}: {why}"), hint)
}

/// Drift, missing slices and directives without effect, as `apply --dry-run` sees them
/// (root only: bulkhead's marks on its cgroups are trusted xattrs, which only root reads).
fn plan_findings(cx: &Context) -> Vec<Finding> {
    if !bulkhead_sys::process::is_root() {
        return vec![Finding::new(
            Area::Access,
            Level::Unknown,
            "not root: drift, missing slices and directives without effect were not checked (bulkhead's mark on its cgroups is a trusted.* attribute only root can read), and processes this user may not see (hidepid) were not checked",
        )
        .hint("run it as root: sudo bulkhead check")];
    }
    match apply::plan(cx, ApplyRequest::default()) {
        Ok(p) => {
            let mut f = drift::findings(&planned(&p));
            let held: Vec<_> = p
                .chosen
                .reader()
                .held(&p.resolved)
                .into_iter()
                .filter(|h| p.chosen.slices().iter().any(|e| e.as_str() == h.slice))
                .map(|h| (h.slice, h.held))
                .collect();
            f.extend(drift::unenforced(&held));
            f
        }
        Err(e) => drift::refused(&e.diagnostics()),
    }
}

/// The parts of an apply plan `check` judges. Creating a missing slice, and the writes into
/// it, are said once, as the missing slice.
fn planned(p: &ApplyPlan) -> Planned {
    let missing = p.missing_slices();
    let marks: Vec<String> = missing
        .iter()
        .flat_map(|m| [format!("/{}", m.cgroup_path().display()), m.unit()])
        .collect();
    let of_missing = |text: &str| {
        marks.iter().any(|m| {
            text.contains(&format!("{m}/"))
                || text.contains(&format!("{m} "))
                || text.ends_with(m.as_str())
        })
    };
    let changes = p
        .changes
        .ops
        .iter()
        .filter(|op| {
            !matches!(
                op,
                ChosenOp::Cgroupfs(bulkhead_cgroups::fs::Op::Mkdir { .. })
            )
        })
        .map(|op| op.to_string())
        .filter(|t| !of_missing(t))
        .collect();
    Planned {
        missing: missing.iter().map(|m| m.to_string()).collect(),
        changes,
        hugepages: p
            .hugepages
            .iter()
            .flat_map(|h| h.ops.iter().map(|o| o.to_string()))
            .collect(),
        iocost: p
            .iocost
            .iter()
            .flatten()
            .chain(&p.iocost_stale)
            .map(|o| o.to_string())
            .collect(),
        notes: p.notes.clone(),
    }
}

/// Where the server and helper slices are, in every hierarchy they exist in. A directory is
/// enough here (no mark): a process inside one is there, whoever made it.
fn slice_dirs<'a>(chosen: &Chosen, names: impl Iterator<Item = &'a SliceName>) -> Vec<SliceDirs> {
    let fs = chosen.reader();
    let layout = &fs.layout;
    names
        .map(|name| SliceDirs {
            name: name.clone(),
            dirs: layout
                .v1
                .iter()
                .chain(layout.unified.iter())
                .filter(|h| fs.dir(h, name).is_dir())
                .map(|h| {
                    let rel = fs.root.join(name.cgroup_path());
                    (h.clone(), format!("/{}", rel.display()))
                })
                .collect(),
        })
        .collect()
}

fn wants(plan: &Plan, resolved: &ResolvedPlan, roles: &Roles) -> Wants {
    let io_weights = plan.slices.values().any(|s| {
        s.directives.contains_key("IOWeight") || s.directives.contains_key("IODeviceWeight")
    });
    let server_no_swap = !roles.server.is_empty()
        && roles.server.iter().all(|n| {
            resolved
                .slices
                .iter()
                .any(|s| s.name() == n && s.memory_swap_max == Some(Limit::Bytes(0)))
        });
    let io_caps = resolved
        .slices
        .iter()
        .filter(|s| !roles.server.contains(s.name()))
        .flat_map(|s| {
            s.io_max
                .keys()
                .map(move |dev| (dev.to_string(), s.name().to_string()))
        })
        .collect();
    let guard_sideloads = plan
        .guard
        .iter()
        .flat_map(|g| g.sideloads.iter().map(ToString::to_string))
        .collect();
    Wants {
        io_caps,
        guard_sideloads,
        plan_sets_thp: plan
            .hugepages
            .as_ref()
            .is_some_and(|h| h.thp_enabled.is_some()),
        io_weights,
        server_no_swap,
    }
}

fn facts(chosen: &Chosen, placements: &[Expected]) -> Facts {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    Facts {
        thp: hostfacts::hugepages::thp(&Default::default())
            .enabled
            .map(|c| c.active),
        swap_total: hostfacts::meminfo_field(&meminfo, "SwapTotal").unwrap_or(0),
        disks: data_disks(chosen, placements),
    }
}

/// The disks the running servers' working directories are on (PostgreSQL's is its data
/// directory, Redis's its `dir`), each once.
fn data_disks(chosen: &Chosen, placements: &[Expected]) -> Vec<DataDisk> {
    let qos = iocost::root(&chosen.reader().layout)
        .ok()
        .and_then(|r| std::fs::read_to_string(r.join(iocost::QOS)).ok());
    let servers = placements
        .iter()
        .filter(|e| e.role == placement::Role::Server)
        .flat_map(|e| {
            let name = e.what.trim_start_matches("database server ").to_string();
            e.inside
                .iter()
                .copied()
                .chain(e.outside.iter().map(|f| f.pid))
                .map(move |pid| (name.clone(), pid))
        })
        .take(DISK_LOOKUPS);
    let caps = chosen.reader().layout.caps();
    let mut out: Vec<DataDisk> = Vec::new();
    for (name, pid) in servers {
        let Ok(d) = DevNum::resolve(Path::new(&format!("/proc/{pid}/cwd"))) else {
            continue;
        };
        if out.iter().any(|x| x.disk == d.to_string()) {
            continue;
        }
        out.push(DataDisk {
            disk: d.to_string(),
            name: d.kernel_name().unwrap_or_else(|| d.to_string()),
            scheduler: d.scheduler(),
            iocost: qos
                .as_deref()
                .and_then(|q| iocost::line_of(q, d))
                .is_some_and(|l| l.split_whitespace().any(|w| w == "enable=1")),
            by: format!("{name} {pid}"),
            weight_hint: caps.weight_hint(&d.kernel_name().unwrap_or_else(|| "DISK".into())),
        });
    }
    out
}
