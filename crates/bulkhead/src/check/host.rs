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
    /// The caps the plan sets on slices other than the servers': (disk `MAJ:MIN`, slice).
    pub io_caps: Vec<(String, String)>,
    /// The slices the plan's `[guard]` throttles when the server suffers (none: no guard).
    pub guard_sideloads: Vec<String>,
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
    f.disks.iter().map(|d| io_disk(d, w)).collect()
}

/// What acts on the I/O the other slices do on one of the database's disks: weights (with
/// BFQ or io.cost on it), a cap the plan sets on it, the guard's throttle; a warning when
/// nothing does, with the hints that can work on this host.
fn io_disk(d: &DataDisk, w: &Wants) -> Finding {
    let sched = d.scheduler.as_deref().unwrap_or("unknown");
    let disk = format!("{} ({}), the disk of {}", d.name, d.disk, d.by);
    let weights_act = sched == "bfq" || d.iocost;
    if w.io_weights && weights_act {
        let how = if d.iocost { "io.cost" } else { "BFQ" };
        return Finding::new(
            Area::Io,
            Level::Ok,
            format!("{disk}: I/O weights are enforced ({how})"),
        );
    }
    let weights = if !w.io_weights {
        "the plan sets no I/O weight".to_string()
    } else {
        format!(
            "scheduler '{sched}' and io.cost off, so the plan's I/O weights have no effect on it"
        )
    };
    let capped: Vec<&str> = w
        .io_caps
        .iter()
        .filter(|(dev, _)| *dev == d.disk)
        .map(|(_, slice)| slice.as_str())
        .collect();
    if !capped.is_empty() {
        return Finding::new(
            Area::Io,
            Level::Ok,
            format!(
                "{disk}: the I/O of {} is capped on it (IO*BandwidthMax/IO*IOPSMax); {weights}",
                capped.join(", ")
            ),
        );
    }
    if !w.guard_sideloads.is_empty() {
        return Finding::new(
            Area::Io,
            Level::Ok,
            format!(
                "{disk}: the guard throttles the I/O of {} on it while the server suffers (while bulkhead guard runs); {weights}",
                w.guard_sideloads.join(", ")
            ),
        );
    }
    let hint = if weights_act {
        format!("give the helper slices a low IOWeight (the disk has {sched}{}), or cap them with IOReadBandwidthMax/IOWriteBandwidthMax on it", if d.iocost { " and io.cost" } else { "" })
    } else {
        d.weight_hint.clone()
    };
    Finding::new(
        Area::Io,
        Level::Warning,
        format!("{disk}: {weights} and no slice is capped on it: the disk I/O of the other slices is not limited"),
    )
    .hint(format!("{hint}; or accept it for this host: [check] accept = [\"io\"]"))
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
        // No weight and no cap: nothing limits the helpers on any disk, BFQ or not.
        let none = io(&f, &Wants::default());
        assert!(none.iter().all(|x| x.level == Level::Warning), "{none:?}");
        assert!(none[0]
            .message
            .contains("the plan sets no I/O weight and no slice is capped"));
        assert!(none[0]
            .hint
            .as_deref()
            .unwrap()
            .contains("accept = [\"io\"]"));
    }

    #[test]
    fn a_cap_or_the_guard_acts_where_weights_cannot() {
        let f = Facts {
            disks: vec![DataDisk {
                disk: "254:0".into(),
                name: "vda".into(),
                scheduler: Some("mq-deadline".into()),
                iocost: false,
                by: "postgres 1".into(),
                weight_hint: "cap them".into(),
            }],
            ..Default::default()
        };
        let capped = Wants {
            io_weights: true,
            io_caps: vec![
                ("8:0".into(), "other".into()),
                ("254:0".into(), "db-helper".into()),
            ],
            ..Default::default()
        };
        let got = io(&f, &capped);
        assert_eq!(got[0].level, Level::Ok, "{got:?}");
        assert!(
            got[0].message.contains("the I/O of db-helper is capped"),
            "{got:?}"
        );
        assert!(got[0].message.contains("have no effect"), "{got:?}");
        // A cap on another disk does not count.
        let elsewhere = Wants {
            io_caps: vec![("8:0".into(), "db-helper".into())],
            ..Default::default()
        };
        assert_eq!(io(&f, &elsewhere)[0].level, Level::Warning);
        let guarded = Wants {
            guard_sideloads: vec!["db-helper".into()],
            ..Default::default()
        };
        let got = io(&f, &guarded);
        assert_eq!(got[0].level, Level::Ok, "{got:?}");
        assert!(got[0]
            .message
            .contains("the guard throttles the I/O of db-helper"));
    }
}
