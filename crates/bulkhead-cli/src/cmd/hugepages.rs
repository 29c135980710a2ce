//! `hugepages status|usage|collapse|reset`: the library reads and changes, this prints.

use crate::args::hugepages::{HugepagesCmd, PidArgs, ResetArgs, StatusArgs};
use crate::args::Cli;
use crate::cmd::json;
use bulkhead::actions::hugepages::{self, Choice, HugetlbCounter, ProcessUsage, Status};
use bulkhead::error::Result;
use bulkhead::units::human_bytes;

pub fn dispatch(cli: &Cli, c: &HugepagesCmd) -> Result<i32> {
    match c {
        HugepagesCmd::Status(a) => status(cli, a),
        HugepagesCmd::Usage(a) => usage_cmd(a),
        HugepagesCmd::Collapse(a) => collapse_cmd(a),
        HugepagesCmd::Reset(a) => reset(cli, a),
    }
}

fn pct(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

fn counter_text(c: &HugetlbCounter) -> String {
    let lim = |v: Option<u64>| v.map_or("max".to_string(), human_bytes);
    let mut s = format!("{} / {}", human_bytes(c.current), lim(c.max));
    if let Some(r) = c.rsvd_current {
        s.push_str(&format!(
            ", reserved {} / {}",
            human_bytes(r),
            lim(c.rsvd_max)
        ));
    }
    if c.limit_hits > 0 {
        s.push_str(&format!(", {} refused at the limit", c.limit_hits));
    }
    s
}

fn status(cli: &Cli, a: &StatusArgs) -> Result<i32> {
    let st = hugepages::status(&cli.context(), a.top)?;
    if a.json {
        println!("{}", json(&st));
        return Ok(0);
    }
    print_pools(&st);
    print_thp_and_memory(&st);
    print_slices(&st);
    print_top(&st);
    print_saved(&st);
    Ok(0)
}

fn print_pools(st: &Status) {
    println!(
        "Huge page pools (default size {}):",
        human_bytes(st.default_size)
    );
    println!(
        "  {:<5} {:>8} {:>8} {:>9} {:>8} {:>9}  per node (pages)",
        "size", "pages", "free", "reserved", "surplus", "memory"
    );
    for p in &st.pools {
        let nodes: Vec<String> = p
            .nodes
            .iter()
            .map(|n| format!("node{} {} ({} free)", n.node, n.total, n.free))
            .collect();
        println!(
            "  {:<5} {:>8} {:>8} {:>9} {:>8} {:>9}  {}",
            human_bytes(p.size),
            p.total,
            p.free,
            p.reserved,
            p.surplus,
            human_bytes((p.total + p.surplus) * p.size),
            nodes.join(", ")
        );
    }
}

/// The THP switches, the memory summary and the hugetlbfs mounts.
fn print_thp_and_memory(st: &Status) {
    let choice = |c: &Option<Choice>| {
        c.as_ref().map_or("unavailable".to_string(), |c| {
            format!("{} (of {})", c.active, c.offered.join(" "))
        })
    };
    println!(
        "THP: enabled {}, defrag {}, shmem {}; khugepaged has collapsed {} page(s)",
        choice(&st.thp.enabled),
        choice(&st.thp.defrag),
        st.thp
            .shmem_enabled
            .as_ref()
            .map_or("unavailable".into(), |c| c.active.clone()),
        st.thp.khugepaged_pages_collapsed.unwrap_or(0)
    );
    let m = &st.meminfo;
    println!(
        "Memory: {} RAM, {} available; THP: anonymous {}, shmem {}, file {}; hugetlb pools {}",
        human_bytes(m.mem_total),
        human_bytes(m.mem_available),
        human_bytes(m.anon_huge),
        human_bytes(m.shmem_huge),
        human_bytes(m.file_huge),
        human_bytes(m.hugetlb)
    );
    if st.mounts.is_empty() {
        println!("hugetlbfs mounts: none");
    }
    for mt in &st.mounts {
        println!(
            "hugetlbfs mount: {} ({} pages; {})",
            mt.path.display(),
            human_bytes(mt.pagesize),
            mt.options
        );
    }
}

fn print_slices(st: &Status) {
    if st.slices.is_empty() {
        return;
    }
    println!("\nSlices (hugetlb: current / limit):");
    for s in &st.slices {
        let h: Vec<String> = s
            .hugetlb
            .iter()
            .map(|c| format!("{} {}", human_bytes(c.size), counter_text(c)))
            .collect();
        println!(
            "  {:<24} THP {:>8}   {}",
            s.slice,
            s.thp.map_or("-".into(), human_bytes),
            if h.is_empty() {
                "hugetlb not tracked".to_string()
            } else {
                h.join("; ")
            }
        );
    }
}

/// The processes with the most huge page memory, and those that did not get what they
/// asked for.
fn print_top(st: &Status) {
    println!("\nProcesses with the most huge page memory:");
    if st.top.is_empty() {
        println!("  none");
    } else {
        println!(
            "  {:>7} {:<16} {:>10} {:>10} {:>9} {:>10}",
            "PID", "command", "anonymous", "THP", "coverage", "hugetlb"
        );
        for p in &st.top {
            println!(
                "  {:>7} {:<16} {:>10} {:>10} {:>9} {:>10}",
                p.pid,
                p.comm,
                human_bytes(p.anonymous),
                human_bytes(p.thp),
                pct(p.thp_coverage),
                human_bytes(p.hugetlb)
            );
        }
    }
    if !st.wanting.is_empty() {
        println!("\nAsked for huge pages but did not get them:");
        for p in &st.wanting {
            for f in &p.findings {
                println!("  {:>7} {:<16} {f}", p.pid, p.comm);
            }
        }
    }
}

/// What `hugepages reset` would put back.
fn print_saved(st: &Status) {
    if st.saved.is_empty() {
        return;
    }
    let mut what: Vec<String> = st
        .saved
        .files
        .iter()
        .map(|(f, v)| format!("{} = {v}", f.display()))
        .collect();
    what.extend(
        st.saved
            .mounts
            .iter()
            .map(|m| format!("mount {}", m.path.display())),
    );
    println!(
        "\nbulkhead changed these; `bulkhead hugepages reset` puts back:\n  {}",
        what.join("\n  ")
    );
}

fn print_usage(u: &ProcessUsage) {
    println!(
        "PID {} ({}){}",
        u.pid,
        u.comm,
        u.cgroup
            .as_ref()
            .map(|c| format!(", hugetlb cgroup {}", c.display()))
            .unwrap_or_default()
    );
    println!("  resident outside hugetlb  {:>10}", human_bytes(u.rss));
    println!(
        "    on 4K pages             {:>10}",
        human_bytes(u.base_pages)
    );
    println!(
        "    anonymous on THP        {:>10}  ({} of {} anonymous)",
        human_bytes(u.thp),
        pct(u.thp_coverage),
        human_bytes(u.anonymous)
    );
    if u.shmem_thp + u.file_thp > 0 {
        println!(
            "    shmem / file on THP     {:>10} / {}",
            human_bytes(u.shmem_thp),
            human_bytes(u.file_thp)
        );
    }
    if u.hugetlb.is_empty() {
        println!("  hugetlb                   {:>10}", "0");
    }
    for h in &u.hugetlb {
        println!(
            "  hugetlb {:<17} {:>10}",
            format!("{} pages", human_bytes(h.size)),
            human_bytes(h.bytes)
        );
    }
    println!(
        "  MADV_HUGEPAGE areas       {:>10}  ({} of it on THP); MADV_NOHUGEPAGE areas {}",
        human_bytes(u.madvised),
        human_bytes(u.madvised_thp),
        human_bytes(u.refused)
    );
    if let Some(en) = u.thp_enabled {
        println!(
            "  THP for this process      {}",
            if en {
                "allowed"
            } else {
                "switched off (prctl PR_SET_THP_DISABLE)"
            }
        );
    }
    let a = &u.allocator_env;
    if a.glibc_hugetlb.is_some() || a.jemalloc_thp.is_some() {
        let mut v = Vec::new();
        if let Some(g) = &a.glibc_hugetlb {
            v.push(format!("glibc.malloc.hugetlb={g}"));
        }
        if let Some(j) = &a.jemalloc_thp {
            v.push(format!("jemalloc thp:{j}"));
        }
        println!("  allocator switches        {}", v.join(", "));
    }
    for n in &u.numa {
        println!(
            "  NUMA node{}                {:>10}  (hugetlb {})",
            n.node,
            human_bytes(n.bytes),
            human_bytes(n.hugetlb)
        );
    }
    for c in &u.cgroup_counters {
        println!(
            "  cgroup hugetlb {:<10} {}",
            human_bytes(c.size),
            counter_text(c)
        );
    }
    if u.findings.is_empty() {
        println!("  no unmet huge page requests found");
    }
    for f in &u.findings {
        println!("  NOTE: {f}");
    }
}

fn usage_cmd(a: &PidArgs) -> Result<i32> {
    let u = hugepages::usage(a.pid)?;
    if a.json {
        println!("{}", json(&u));
    } else {
        print_usage(&u);
    }
    Ok(0)
}

fn collapse_cmd(a: &PidArgs) -> Result<i32> {
    let r = hugepages::collapse(a.pid)?;
    if a.json {
        println!("{}", json(&r));
    } else {
        println!(
            "PID {} ({}): THP coverage {} -> {} of its anonymous memory ({} -> {} on THP; anonymous {} -> {}; resident {} -> {})",
            r.pid,
            r.comm,
            pct(r.before.fraction),
            pct(r.after.fraction),
            human_bytes(r.before.thp),
            human_bytes(r.after.thp),
            human_bytes(r.before.anonymous),
            human_bytes(r.after.anonymous),
            human_bytes(r.before.rss),
            human_bytes(r.after.rss)
        );
        println!(
            "collapsed {} range(s), {}{}",
            r.ranges,
            human_bytes(r.bytes),
            if r.skipped_nohugepage > 0 {
                format!(
                    "; {} area(s) marked MADV_NOHUGEPAGE left alone",
                    r.skipped_nohugepage
                )
            } else {
                String::new()
            }
        );
        for f in &r.failed {
            eprintln!("bulkhead: warning: not collapsed: {f}");
        }
    }
    Ok(if r.failed.is_empty() { 0 } else { 1 })
}

fn reset(cli: &Cli, a: &ResetArgs) -> Result<i32> {
    let reset = hugepages::plan_reset()?;
    let (path, plan) = (&reset.record, &reset.ops);
    if reset.is_empty() {
        if a.json {
            println!("{}", serde_json::json!({"record": path, "changes": []}));
        } else if !cli.quiet {
            println!(
                "nothing to reset: bulkhead has not changed huge page settings (no record in {})",
                path.display()
            );
        }
        return Ok(0);
    }
    if a.dry_run {
        if a.json {
            println!(
                "{}",
                json(&serde_json::json!({"record": path, "dry_run": true, "changes": plan}))
            );
        } else {
            for op in plan {
                println!("{op}");
            }
            println!(
                "dry run: {} change(s) not made (run without --dry-run to reset)",
                plan.len()
            );
        }
        return Ok(0);
    }
    if !cli.quiet && !a.json {
        for op in plan {
            println!("{op}");
        }
    }
    let out = reset.execute()?;
    if a.json {
        println!(
            "{}",
            json(
                &serde_json::json!({"record": path, "dry_run": false, "changes": plan, "outcome": out})
            )
        );
    } else if !cli.quiet {
        for n in &out.notes {
            eprintln!("bulkhead: note: {n}");
        }
        println!(
            "reset: {} change(s); huge page settings are as bulkhead found them",
            out.done
        );
    }
    Ok(0)
}
