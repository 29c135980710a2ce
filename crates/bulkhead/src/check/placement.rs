//! Expected placements: which processes belong in which slices, and where they are. Each
//! item is (what, the slices it belongs in, the processes found inside and outside): the
//! plan's own placements ([`Claim`]: services by name, placement rules) first, then the known
//! database servers and helpers among the processes no claim matched. Pure: it judges a scan
//! of /proc against the slices' cgroup paths.

use super::verdict::{Area, Finding, Level};
use bulkhead_cgroups::fs::original_path;
use bulkhead_cgroups::layout::Hierarchy;
use bulkhead_plan::{Plan, SliceName};

/// One process as the check sees it (from one scan of /proc).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProcEntry {
    pub pid: u32,
    /// `/proc/PID/comm`: the first 15 bytes of the executable's name (or what it set).
    pub comm: String,
    /// `/proc/PID/cgroup`, as the kernel prints it.
    #[serde(skip)]
    pub cgroup: String,
    /// Its real UID.
    pub uid: u32,
    /// Root or a system user runs it, from an executable root owns: what vouches that a
    /// process named like a database server is one (any user can name a process `postgres`).
    #[serde(skip)]
    pub vouched: bool,
}

/// Whether the kernel vouches for a process's name: root or a system user runs it, from an
/// executable root owns (any user can name a process `postgres` or title it `postgres: io
/// worker 0`).
pub fn vouched(p: &bulkhead_sys::procs::Proc) -> bool {
    bulkhead_sys::users::is_system_uid(p.uid) && p.exe_owner == Some(0)
}

impl From<bulkhead_sys::procs::Proc> for ProcEntry {
    fn from(p: bulkhead_sys::procs::Proc) -> Self {
        ProcEntry {
            pid: p.pid.unsigned_abs(),
            vouched: vouched(&p),
            uid: p.uid,
            comm: p.comm,
            cgroup: p.cgroup,
        }
    }
}

/// Whether a process has a known server's, helper's or monitoring agent's name.
pub fn known_name(comm: &str) -> bool {
    SERVERS
        .iter()
        .chain(HELPERS)
        .chain(MONITORS)
        .any(|n| comm == comm_of(n))
}

/// Database servers by executable name: they belong in the server slice(s).
pub const SERVERS: &[&str] = &[
    "postgres",
    "postmaster",
    "mysqld",
    "mariadbd",
    "redis-server",
    "valkey-server",
    "keydb-server",
    "mongod",
    "clickhouse-server",
    "scylla",
    "memcached",
];

/// The database's companions by executable name: they belong in the helper slice(s).
pub const HELPERS: &[&str] = &[
    "pg_dump",
    "pg_dumpall",
    "pg_basebackup",
    "pg_restore",
    "pgbackrest",
    "barman",
    "wal-g",
    "mysqldump",
    "mariadb-dump",
    "mariabackup",
    "xtrabackup",
    "mongodump",
    "restic",
    "borg",
    "rsync",
];

/// Agents that watch the database and must answer on time (a scrape that waits seconds is a
/// false InstanceDown alert): they belong in the monitoring slice(s), else the helper slices.
pub const MONITORS: &[&str] = &[
    "node_exporter",
    "postgres_exporter",
    "redis_exporter",
    "mysqld_exporter",
    "mongodb_exporter",
    "process-exporter",
    "telegraf",
    "vmagent",
    "grafana-agent",
    "alloy",
    "otelcol",
    "otelcol-contrib",
    "pmm-agent",
    "collectd",
    "zabbix_agentd",
    "zabbix_agent2",
];

/// Which slices a kind of process belongs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Server,
    Helper,
    Monitor,
}

/// The plan's server, helper and monitoring slices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roles {
    pub server: Vec<SliceName>,
    pub helper: Vec<SliceName>,
    /// The slices whose name ends in `monitor` (db-monitor); none in plans made before it.
    pub monitor: Vec<SliceName>,
}

impl Roles {
    /// `[guard]`'s protect and sideloads when the plan has that section; otherwise the
    /// slices whose name ends in `server` and in `helper` (db-server, db-helper). The
    /// monitoring slices are those whose name ends in `monitor` either way.
    pub fn of(plan: &Plan) -> Roles {
        let named = |suffix: &str| {
            plan.slices
                .keys()
                .filter(|n| n.as_str().ends_with(suffix))
                .cloned()
                .collect()
        };
        let monitor = named("monitor");
        if let Some(g) = &plan.guard {
            return Roles {
                server: vec![g.protect.clone()],
                helper: g.sideloads.clone(),
                monitor,
            };
        }
        Roles {
            server: named("server"),
            helper: named("helper"),
            monitor,
        }
    }

    /// The slices a role belongs in: monitoring agents in the helper slices where the plan
    /// has no monitoring slice (as before there was one).
    pub fn of_role(&self, r: Role) -> &[SliceName] {
        match r {
            Role::Server => &self.server,
            Role::Monitor if !self.monitor.is_empty() => &self.monitor,
            Role::Helper | Role::Monitor => &self.helper,
        }
    }
}

/// Where a slice is: its cgroup path in each hierarchy it exists in (empty: it does not).
#[derive(Debug, Clone)]
pub struct SliceDirs {
    pub name: SliceName,
    pub dirs: Vec<(Hierarchy, String)>,
}

/// A process found outside the slices it belongs in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Found {
    pub pid: u32,
    pub comm: String,
    /// Its real UID.
    pub uid: u32,
    /// Its cgroup in the hierarchy `check` names processes by (the CPU controller's).
    pub cgroup: String,
}

/// One expected placement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Expected {
    /// `database server redis-server`, `helper pg_dump`.
    pub what: String,
    pub role: Role,
    /// The slices it belongs in (any of them, or a slice below one).
    pub slices: Vec<String>,
    pub inside: Vec<u32>,
    pub outside: Vec<Found>,
}

/// `comm` holds the first 15 bytes of a name.
fn comm_of(name: &str) -> &str {
    &name[..name.len().min(15)]
}

fn within(path: &str, slice: &str) -> bool {
    path == slice
        || path
            .strip_prefix(slice)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether a process is in this slice (or below it) in every hierarchy the slice exists in.
fn in_slice(cgroup: &str, s: &SliceDirs) -> bool {
    !s.dirs.is_empty()
        && s.dirs
            .iter()
            .all(|(h, path)| original_path(cgroup, h).is_some_and(|p| within(&p, path)))
}

/// A placement the plan makes itself (a service by name, a placement rule): the processes
/// it matched belong in its slices. Claimed processes are judged by their claim only, never
/// again by their name (a PostgreSQL backend a rule sends to the helper slice is not a
/// server outside the server slice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// `service postgresql@15-main`, `rule backup-role`.
    pub what: String,
    /// How bad it is when its processes are elsewhere.
    pub role: Role,
    pub slices: Vec<SliceName>,
    pub pids: Vec<u32>,
}

/// The expected placements: first each claim, then the known servers and helpers among the
/// processes no claim matched, from one scan. `slices` holds every slice named by a role or
/// a claim; `by`: the hierarchy a process's cgroup is named in.
pub fn expected(
    procs: &[ProcEntry],
    claims: &[Claim],
    roles: &Roles,
    slices: &[SliceDirs],
    by: Option<&Hierarchy>,
) -> Vec<Expected> {
    let mut out = Vec::new();
    for c in claims {
        let hits: Vec<&ProcEntry> = procs.iter().filter(|p| c.pids.contains(&p.pid)).collect();
        out.push(judge(c.what.clone(), c.role, &c.slices, &hits, slices, by));
    }
    let free: Vec<&ProcEntry> = procs
        .iter()
        .filter(|p| !claims.iter().any(|c| c.pids.contains(&p.pid)))
        .collect();
    let known = SERVERS
        .iter()
        .map(|n| (*n, Role::Server))
        .chain(HELPERS.iter().map(|n| (*n, Role::Helper)))
        .chain(MONITORS.iter().map(|n| (*n, Role::Monitor)));
    for (name, role) in known {
        // A name counts only where the kernel vouches for it: root or a system user runs it
        // from a root-owned executable (issue 40 #8: any user can name a process `postgres`,
        // and an ordinary user's own rsync is not the database's helper).
        let hits: Vec<&ProcEntry> = free
            .iter()
            .copied()
            .filter(|p| p.comm == comm_of(name) && p.vouched)
            .collect();
        if hits.is_empty() {
            continue;
        }
        let what = match role {
            Role::Server => format!("database server {name}"),
            Role::Helper => format!("helper {name}"),
            Role::Monitor => format!("monitoring agent {name}"),
        };
        out.push(judge(what, role, roles.of_role(role), &hits, slices, by));
    }
    out
}

/// Which of `hits` are in one of `names` (or below it).
fn judge(
    what: String,
    role: Role,
    names: &[SliceName],
    hits: &[&ProcEntry],
    slices: &[SliceDirs],
    by: Option<&Hierarchy>,
) -> Expected {
    let wanted: Vec<&SliceDirs> = slices.iter().filter(|s| names.contains(&s.name)).collect();
    let mut e = Expected {
        what,
        role,
        slices: names.iter().map(|s| s.to_string()).collect(),
        inside: vec![],
        outside: vec![],
    };
    for p in hits {
        if wanted.iter().any(|s| in_slice(&p.cgroup, s)) {
            e.inside.push(p.pid);
        } else {
            e.outside.push(Found {
                pid: p.pid,
                comm: p.comm.clone(),
                uid: p.uid,
                cgroup: by
                    .and_then(|h| original_path(&p.cgroup, h))
                    .unwrap_or_else(|| "?".into()),
            });
        }
    }
    e
}

/// At most this many PIDs are named in one finding.
const NAMED: usize = 5;

fn pids(found: &[Found]) -> String {
    let mut s: Vec<String> = found
        .iter()
        .take(NAMED)
        .map(|f| format!("{} (UID {}) in {}", f.pid, f.uid, f.cgroup))
        .collect();
    if found.len() > NAMED {
        s.push(format!("and {} more", found.len() - NAMED));
    }
    s.join(", ")
}

/// A database server outside the server slices is critical; a helper outside the helper
/// slices weakens protection (a warning); a role the plan has no slice for cannot be judged.
pub fn findings(items: &[Expected]) -> Vec<Finding> {
    let mut out = Vec::new();
    for e in items {
        if e.slices.is_empty() {
            let (role, key) = match e.role {
                Role::Server => ("server", "protect"),
                Role::Helper | Role::Monitor => ("helper", "sideloads"),
            };
            out.push(
                Finding::new(
                    Area::Placement,
                    Level::Unknown,
                    format!(
                        "{} runs ({} process(es)) but the plan names no {role} slice",
                        e.what,
                        e.inside.len() + e.outside.len()
                    ),
                )
                .hint(format!(
                    "name the slice `{role}` ends with (e.g. db-{role}), or set [guard] {key}"
                )),
            );
            continue;
        }
        let slices = e.slices.join(" or ");
        if e.outside.is_empty() {
            out.push(Finding::new(
                Area::Placement,
                Level::Ok,
                format!("{}: {} process(es) in {slices}", e.what, e.inside.len()),
            ));
            continue;
        }
        let level = match e.role {
            Role::Server => Level::Critical,
            Role::Helper | Role::Monitor => Level::Warning,
        };
        out.push(
            Finding::new(
                Area::Placement,
                level,
                format!(
                    "{} outside {slices}: {} process(es) ({})",
                    e.what,
                    e.outside.len(),
                    pids(&e.outside)
                ),
            )
            .hint(format!("bulkhead move --tree --slice {} PID", e.slices[0])),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulkhead_cgroups::layout::Layout;
    use std::path::Path;

    const MOUNTS: &str = "\
30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct
31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";

    fn proc(pid: u32, comm: &str, cpu: &str, v2: &str) -> ProcEntry {
        ProcEntry {
            pid,
            comm: comm.into(),
            cgroup: format!("3:cpu,cpuacct:{cpu}\n0::{v2}\n"),
            uid: 105,
            vouched: true,
        }
    }

    /// Issue 40 #8: a process an ordinary user named `postgres` (or ran from its own copy)
    /// is not a server: the verdict is not turned, and no one is told to move it.
    #[test]
    fn a_users_process_named_like_a_server_is_not_one() {
        let mut fake = proc(7, "postgres", "/user.slice", "/user.slice");
        fake.vouched = false;
        fake.uid = 1000;
        let (layout, roles, slices) = setup();
        let f = found(&[fake], &[], &roles, &slices, &layout);
        assert!(f.is_empty(), "{f:?}");
    }

    /// The findings for these processes, named by the cpu hierarchy.
    fn found(
        procs: &[ProcEntry],
        claims: &[Claim],
        roles: &Roles,
        slices: &[SliceDirs],
        layout: &Layout,
    ) -> Vec<Finding> {
        findings(&expected(
            procs,
            claims,
            roles,
            slices,
            layout.hierarchy("cpu"),
        ))
    }

    fn setup() -> (Layout, Roles, Vec<SliceDirs>) {
        let layout = Layout::from_mountinfo(MOUNTS, Path::new("/sys/fs/cgroup"));
        let name = |s: &str| SliceName::parse(s).unwrap();
        let dirs = |path: &str| {
            let mut v: Vec<(Hierarchy, String)> = layout
                .v1
                .iter()
                .map(|h| (h.clone(), path.to_string()))
                .collect();
            v.extend(layout.unified.iter().map(|h| (h.clone(), path.to_string())));
            v
        };
        let slices = vec![
            SliceDirs {
                name: name("db-server"),
                dirs: dirs("/t/db.slice/db-server.slice"),
            },
            SliceDirs {
                name: name("db-helper"),
                dirs: dirs("/t/db.slice/db-helper.slice"),
            },
        ];
        let roles = Roles {
            server: vec![name("db-server")],
            helper: vec![name("db-helper")],
            monitor: vec![],
        };
        (layout, roles, slices)
    }

    #[test]
    fn a_server_in_its_slice_or_below_is_inside() {
        let (layout, roles, slices) = setup();
        let s = "/t/db.slice/db-server.slice";
        let procs = [
            proc(10, "redis-server", s, s),
            proc(11, "postgres", &format!("{s}/child"), &format!("{s}/child")),
            proc(12, "bash", "/", "/"),
        ];
        let e = expected(&procs, &[], &roles, &slices, layout.hierarchy("cpu"));
        assert_eq!(e.len(), 2);
        assert!(e.iter().all(|x| x.outside.is_empty()), "{e:?}");
        assert!(findings(&e).iter().all(|f| f.level == Level::Ok));
    }

    #[test]
    fn a_server_outside_in_any_hierarchy_is_critical() {
        let (layout, roles, slices) = setup();
        let s = "/t/db.slice/db-server.slice";
        let procs = [
            // moved out in the cpu hierarchy only
            proc(10, "redis-server", "/user.slice", s),
            // a sibling whose name starts like the slice is not inside it
            proc(11, "postgres", &format!("{s}x"), &format!("{s}x")),
        ];
        let e = expected(&procs, &[], &roles, &slices, layout.hierarchy("cpu"));
        let f = findings(&e);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f.iter().all(|x| x.level == Level::Critical), "{f:?}");
        assert!(f[0]
            .message
            .contains("postgres outside db-server: 1 process(es) (11 (UID 105) in"));
        assert!(
            f[1].message.contains(
                "redis-server outside db-server: 1 process(es) (10 (UID 105) in /user.slice)"
            ),
            "{}",
            f[1].message
        );
        assert!(f[1].hint.as_deref().unwrap().contains("--slice db-server"));
    }

    #[test]
    fn a_helper_outside_is_a_warning_and_inside_the_server_slice_too() {
        let (layout, roles, slices) = setup();
        let s = "/t/db.slice/db-server.slice";
        let h = "/t/db.slice/db-helper.slice";
        let procs = [
            proc(20, "pg_dump", h, h),
            proc(21, "rsync", s, s),
            // comm holds 15 bytes of postgres_exporter
            proc(22, "postgres_export", "/", "/"),
        ];
        let e = expected(&procs, &[], &roles, &slices, layout.hierarchy("cpu"));
        let f = findings(&e);
        let levels: Vec<(String, Level)> = f
            .iter()
            .map(|x| (x.message.split(':').next().unwrap().to_string(), x.level))
            .collect();
        assert_eq!(
            levels,
            [
                ("helper pg_dump".to_string(), Level::Ok),
                ("helper rsync outside db-helper".to_string(), Level::Warning),
                (
                    "monitoring agent postgres_exporter outside db-helper".to_string(),
                    Level::Warning
                ),
            ]
        );
    }

    #[test]
    fn a_missing_slice_holds_nobody_and_no_role_cannot_be_judged() {
        let (layout, roles, mut slices) = setup();
        slices[0].dirs.clear();
        let s = "/t/db.slice/db-server.slice";
        let procs = [proc(10, "mongod", s, s)];
        let f = found(&procs, &[], &roles, &slices, &layout);
        assert_eq!(f[0].level, Level::Critical);
        let f = findings(&expected(&procs, &[], &Roles::default(), &slices, None));
        assert_eq!(f[0].level, Level::Unknown);
        assert!(
            f[0].message.contains("names no server slice"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_claimed_process_is_judged_by_its_claim_only() {
        let (layout, roles, slices) = setup();
        let s = "/t/db.slice/db-server.slice";
        let h = "/t/db.slice/db-helper.slice";
        // The postmaster in the server slice; the backend serving pg_dump in the helper
        // slice, where a rule sent it.
        let procs = [proc(30, "postgres", s, s), proc(31, "postgres", h, h)];
        let claim = Claim {
            what: "rule backup-role".into(),
            role: Role::Helper,
            slices: vec![SliceName::parse("db-helper").unwrap()],
            pids: vec![31],
        };
        let e = expected(
            &procs,
            std::slice::from_ref(&claim),
            &roles,
            &slices,
            layout.hierarchy("cpu"),
        );
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(
            (e[0].what.as_str(), e[0].inside.as_slice()),
            ("rule backup-role", &[31][..])
        );
        assert_eq!(e[1].inside, [30]);
        assert!(findings(&e).iter().all(|f| f.level == Level::Ok));
        // Without the claim the backend is a server outside the server slice.
        let f = found(&procs, &[], &roles, &slices, &layout);
        assert_eq!(f[0].level, Level::Critical);
        // A claimed process outside its claim's slices is said by the claim.
        let moved = [proc(30, "postgres", s, s), proc(31, "postgres", s, s)];
        let f = found(&moved, &[claim], &roles, &slices, &layout);
        assert_eq!(f[0].level, Level::Warning);
        assert!(
            f[0].message
                .starts_with("rule backup-role outside db-helper"),
            "{}",
            f[0].message
        );
    }

    /// Issue 43: a plan with a monitoring slice expects its agents there (not in the helper
    /// slice); a plan without one, in the helper slices as before.
    #[test]
    fn monitoring_agents_belong_in_the_monitoring_slice_where_the_plan_has_one() {
        let (layout, mut roles, mut slices) = setup();
        let h = "/t/db.slice/db-helper.slice";
        let m = "/t/db.slice/db-monitor.slice";
        let agents = [
            proc(40, "node_exporter", h, h),
            proc(41, "node_exporter", m, m),
        ];
        let f = found(&agents, &[], &roles, &slices, &layout);
        assert_eq!(f[0].level, Level::Warning, "{f:?}");
        assert!(f[0]
            .message
            .starts_with("monitoring agent node_exporter outside db-helper: 1"));
        let monitor = SliceName::parse("db-monitor").unwrap();
        roles.monitor = vec![monitor.clone()];
        let dirs = slices[1]
            .dirs
            .iter()
            .map(|(h, _)| (h.clone(), m.to_string()));
        slices.push(SliceDirs {
            name: monitor,
            dirs: dirs.collect(),
        });
        let f = found(&agents, &[], &roles, &slices, &layout);
        assert!(
            f[0].message.starts_with(
                "monitoring agent node_exporter outside db-monitor: 1 process(es) (40"
            ),
            "{f:?}"
        );
        let p = Plan::parse(bulkhead_plan::EMBEDDED_DEFAULT, None).unwrap();
        assert_eq!(
            Roles::of(&p).monitor,
            [SliceName::parse("db-monitor").unwrap()]
        );
    }

    #[test]
    fn roles_come_from_the_guard_section_else_from_the_names() {
        let p = Plan::parse("[slice.db-server]\nCPUWeight = 100\n[slice.db-helper]\nCPUWeight = 10\n[slice.other]\n", None).unwrap();
        let r = Roles::of(&p);
        assert_eq!(r.server, [SliceName::parse("db-server").unwrap()]);
        assert_eq!(r.helper, [SliceName::parse("db-helper").unwrap()]);
        let p = Plan::parse(
            "[slice.pg]\nCPUWeight = 100\n[slice.batch]\nCPUWeight = 10\n[guard]\nprotect = \"pg\"\nsideloads = [\"batch\"]\n",
            None,
        )
        .unwrap();
        let r = Roles::of(&p);
        assert_eq!(r.server, [SliceName::parse("pg").unwrap()]);
        assert_eq!(r.helper, [SliceName::parse("batch").unwrap()]);
    }
}
