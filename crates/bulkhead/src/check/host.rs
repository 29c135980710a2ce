//! The host as the database wants it: the I/O scheduler or io.cost on the disks its data is
//! on, swap, and transparent huge pages. The judgments are pure (facts in, findings out);
//! `facts` reads them.

use super::placement::{Expected, Role};
use super::verdict::{Area, Finding, Level};

/// Databases whose vendors advise against THP `always` (latency stalls from fault-time
/// compaction and khugepaged; Redis warns at start, PostgreSQL, MongoDB before 8.0 and MySQL
/// document it).
const THP_AVERSE: &[&str] = &[
    "postgres",
    "redis-server",
    "valkey-server",
    "mongod",
    "mysqld",
    "mariadbd",
];

/// One disk a database server keeps its working directory on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DataDisk {
    /// `MAJ:MIN` of the whole disk.
    pub disk: String,
    pub name: String,
    /// The active scheduler (`none`, `mq-deadline`, `bfq`); None: unreadable.
    pub scheduler: Option<String>,
    /// io.cost is enabled on it (`enable=1` in io.cost.qos).
    pub iocost: bool,
    /// Which server process led here: `postgres 812`.
    pub by: String,
    /// What can make I/O weights act on this disk on this host (only what can work here).
    #[serde(skip)]
    pub weight_hint: String,
}

/// What `check` reads of the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// THP's active mode (`always`, `madvise`, `never`); None: no THP in this kernel.
    pub thp: Option<String>,
    /// Swap space in use or available, bytes (SwapTotal).
    pub swap_total: u64,
    pub disks: Vec<DataDisk>,
}

/// What the plan says about these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wants {
    /// The plan sets THP itself ([hugepages] thp): its drift is apply's to report.
    pub plan_sets_thp: bool,
    /// The plan gives some slice an I/O weight (IOWeight, IODeviceWeight).
    pub io_weights: bool,
    /// Every server slice has MemorySwapMax=0.
    pub server_no_swap: bool,
}

/// The server names that run (from the expected placements).
fn servers_running<'a>(items: &'a [Expected]) -> impl Iterator<Item = &'a str> + 'a {
    items
        .iter()
        .filter(|e| e.role == Role::Server && !(e.inside.is_empty() && e.outside.is_empty()))
        .filter_map(|e| e.what.strip_prefix("database server "))
}

pub fn findings(f: &Facts, w: &Wants, items: &[Expected]) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(thp(f, w, items));
    out.extend(swap(f, w, items));
    out.extend(io(f, w));
    out
}

fn thp(f: &Facts, w: &Wants, items: &[Expected]) -> Option<Finding> {
    if w.plan_sets_thp {
        return None;
    }
    let mode = f.thp.as_deref()?;
    let averse: Vec<&str> = servers_running(items)
        .filter(|n| THP_AVERSE.contains(n))
        .collect();
    if averse.is_empty() {
        return None;
    }
    if mode != "always" {
        return Some(Finding::new(
            Area::Thp,
            Level::Ok,
            format!("transparent huge pages are '{mode}'"),
        ));
    }
    Some(
        Finding::new(
            Area::Thp,
            Level::Warning,
            format!(
                "transparent huge pages are 'always'; {} want(s) 'madvise' or 'never' (latency stalls from compaction and khugepaged)",
                averse.join(", ")
            ),
        )
        .hint("set [hugepages] thp = \"madvise\" in the plan and run bulkhead apply (or echo madvise > /sys/kernel/mm/transparent_hugepage/enabled)"),
    )
}

fn swap(f: &Facts, w: &Wants, items: &[Expected]) -> Option<Finding> {
    servers_running(items).next()?;
    if f.swap_total == 0 {
        return Some(Finding::new(
            Area::Swap,
            Level::Ok,
            "no swap: the database's memory cannot be swapped out",
        ));
    }
    if w.server_no_swap {
        return Some(Finding::new(
            Area::Swap,
            Level::Ok,
            "swap is on and the server slice has MemorySwapMax=0",
        ));
    }
    Some(
        Finding::new(
            Area::Swap,
            Level::Warning,
            format!(
                "swap is on ({} MiB) and the server slice may use it: the database's memory can be swapped out under the helpers' pressure",
                f.swap_total >> 20
            ),
        )
        .hint("set MemorySwapMax = 0 on the server slice and run bulkhead apply"),
    )
}

fn io(f: &Facts, w: &Wants) -> Vec<Finding> {
    if !w.io_weights {
        return vec![];
    }
    f.disks
        .iter()
        .map(|d| {
            let sched = d.scheduler.as_deref().unwrap_or("unknown");
            if sched == "bfq" || d.iocost {
                let how = if d.iocost { "io.cost" } else { "BFQ" };
                Finding::new(
                    Area::Io,
                    Level::Ok,
                    format!("{} ({}), the disk of {}: I/O weights are enforced ({how})", d.name, d.disk, d.by),
                )
            } else {
                Finding::new(
                    Area::Io,
                    Level::Warning,
                    format!(
                        "{} ({}), the disk of {}: scheduler '{sched}' and io.cost off, so the plan's I/O weights have no effect on it",
                        d.name, d.disk, d.by
                    ),
                )
                .hint(d.weight_hint.clone())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(name: &str) -> Vec<Expected> {
        vec![Expected {
            what: format!("database server {name}"),
            role: Role::Server,
            slices: vec!["db-server".into()],
            inside: vec![1],
            outside: vec![],
        }]
    }

    fn levels(v: &[Finding]) -> Vec<(Area, Level)> {
        v.iter().map(|f| (f.area, f.level)).collect()
    }

    #[test]
    fn thp_always_is_a_warning_for_redis_and_said_nothing_without_a_database() {
        let f = Facts {
            thp: Some("always".into()),
            ..Default::default()
        };
        let w = Wants::default();
        assert_eq!(
            levels(&findings(&f, &w, &running("redis-server"))),
            [(Area::Thp, Level::Warning), (Area::Swap, Level::Ok)]
        );
        assert!(findings(&f, &w, &[]).is_empty());
        // The plan sets THP: apply's drift says it, not this.
        let w = Wants {
            plan_sets_thp: true,
            ..Default::default()
        };
        assert_eq!(
            levels(&findings(&f, &w, &running("redis-server"))),
            [(Area::Swap, Level::Ok)]
        );
    }

    #[test]
    fn swap_on_needs_memory_swap_max_zero_on_the_server() {
        let f = Facts {
            swap_total: 1 << 30,
            ..Default::default()
        };
        let fs = findings(&f, &Wants::default(), &running("postgres"));
        assert_eq!(levels(&fs), [(Area::Swap, Level::Warning)]);
        assert!(fs[0].message.contains("1024 MiB"));
        let w = Wants {
            server_no_swap: true,
            ..Default::default()
        };
        assert_eq!(
            levels(&findings(&f, &w, &running("postgres"))),
            [(Area::Swap, Level::Ok)]
        );
    }

    #[test]
    fn io_weights_need_bfq_or_iocost_on_the_data_disk() {
        let disk = |s: &str, iocost| DataDisk {
            disk: "8:0".into(),
            name: "sda".into(),
            scheduler: Some(s.into()),
            iocost,
            by: "postgres 1".into(),
            weight_hint: String::new(),
        };
        let w = Wants {
            io_weights: true,
            ..Default::default()
        };
        let f = Facts {
            disks: vec![
                disk("none", false),
                disk("bfq", false),
                disk("mq-deadline", true),
            ],
            ..Default::default()
        };
        let got: Vec<Level> = io(&f, &w).iter().map(|x| x.level).collect();
        assert_eq!(got, [Level::Warning, Level::Ok, Level::Ok]);
        assert!(io(&f, &Wants::default()).is_empty());
    }
}
