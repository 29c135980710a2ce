//! Cgroup backends. A backend turns a [`ResolvedPlan`] into [`Op`]s (data, printable as a dry
//! run) and executes them; it also puts processes into slices.
//!
//! [`CgroupFs`] writes cgroupfs directly and handles pure v2, pure v1 and hybrid layouts.
//! [`systemd::Systemd`] (for hosts where systemd is PID 1 and owns the tree) implements the
//! same [`Backend`] trait through systemd's D-Bus API.

pub mod layout;
pub mod mapping;
pub mod mark;
pub mod ops;
pub mod systemd;

pub use layout::{Hierarchy, Layout, Version};
pub use ops::{Op, Outcome};

use bulkhead_plan::{ResolvedPlan, SliceName};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use bulkhead_sys::units::IdSet;
use mapping::{fresh_default, keyed_lines, reset_line, same, same_line, Cmp, Mapper, Want};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// What an apply or destroy would do.
#[derive(Debug, Default, serde::Serialize)]
pub struct Changes {
    pub ops: Vec<Op>,
    /// Directives this host cannot honour, and other findings.
    pub warnings: Vec<Diagnostic>,
    /// Slices considered.
    pub slices: Vec<String>,
    /// v2 controllers enabled on cgroups bulkhead did not create (remembered so destroy can
    /// put them back).
    #[serde(skip)]
    pub foreign_enables: Vec<(PathBuf, String)>,
    #[serde(skip)]
    pub foreign_disables: Vec<(PathBuf, String)>,
}

/// The interface every backend offers.
pub trait Backend {
    /// `cgroupfs` or `systemd`.
    fn name(&self) -> &'static str;
    /// One line for people: the backend and the layout it drives.
    fn describe(&self) -> String;
    /// What `apply` would do, reading the system but changing nothing.
    fn plan_apply(&self, plan: &ResolvedPlan) -> Result<Changes>;
    /// What `destroy` would do for these slices.
    fn plan_destroy(&self, slices: &[SliceName], kill: bool) -> Result<Changes>;
    /// Carry out planned changes; on failure everything already changed is put back.
    fn execute(&self, changes: &Changes) -> Result<Outcome>;
    /// Slices bulkhead created that exist now, parents first.
    fn slices(&self) -> Vec<SliceName>;
    /// Whether a slice exists (and is bulkhead's).
    fn slice_exists(&self, slice: &SliceName) -> bool {
        self.slices().contains(slice)
    }
    /// Move the calling process into a slice (for `run`: join, then exec).
    fn join(&self, slice: &SliceName) -> Result<()>;
    /// Move one whole process into a slice; on failure it is left where it was.
    fn move_pid(&self, slice: &SliceName, pid: i32) -> std::result::Result<(), String>;
}

/// The context of the error [`Backend::join`] gives for a slice that does not exist, so
/// callers can explain it (not in the plan, or not applied yet).
pub const MISSING_SLICE: &str = "missing slice";

/// Where bulkhead keeps runtime state (gone at reboot, like cgroups).
/// The slices to remove for `slices`, children first: child slices that exist but are not
/// named (left from earlier plans) go too, since a parent cannot be removed before them.
pub fn removal_order(slices: &[SliceName], existing: Vec<SliceName>) -> Vec<SliceName> {
    let mut names: Vec<SliceName> = slices.to_vec();
    for e in existing {
        if !names.contains(&e) && e.lineage().iter().any(|a| slices.contains(a)) {
            names.push(e);
        }
    }
    names.sort_by(|a, b| (b.depth(), b.as_str()).cmp(&(a.depth(), a.as_str())));
    names.dedup();
    names
}

pub fn runtime_dir() -> PathBuf {
    bulkhead_sys::paths::runtime_dir()
}

/// The cgroupfs backend: writes control files directly.
#[derive(Debug, Clone)]
pub struct CgroupFs {
    pub layout: Layout,
    /// The cgroup under which slices live, relative to each hierarchy's root ("" for /).
    pub root: PathBuf,
}

impl CgroupFs {
    /// `root` is a cgroup path like `/` or `/bulkhead-test.slice`.
    pub fn new(layout: Layout, root: &str) -> Result<CgroupFs> {
        let rel = root.trim_start_matches('/');
        if rel.split('/').any(|p| p == ".." || p == ".") {
            return Err(Error::invalid(
                Diagnostic::error(format!("cgroup root '{root}' must not contain '.' or '..'"))
                    .hint("give an absolute cgroup path like /bulkhead.slice"),
            ));
        }
        if layout.primary().is_none() {
            return Err(Error::failed_with(
                Diagnostic::error("no cgroup hierarchy is mounted (nothing of type cgroup or cgroup2 in /proc/self/mountinfo)")
                    .hint("mount cgroup2 on /sys/fs/cgroup: mount -t cgroup2 none /sys/fs/cgroup"),
            ));
        }
        Ok(CgroupFs {
            layout,
            root: PathBuf::from(rel),
        })
    }

    /// Every hierarchy bulkhead places slices in, with the controllers it drives there.
    pub fn hierarchies(
        &self,
        uses_cpuset: bool,
        uses_hugetlb: bool,
    ) -> Vec<(&Hierarchy, Vec<&'static str>)> {
        let wanted = |c: &str| match c {
            "cpuset" => uses_cpuset,
            "hugetlb" => uses_hugetlb,
            _ => true,
        };
        let mut out = Vec::new();
        for h in &self.layout.v1 {
            let ctrls: Vec<&'static str> = layout::CONTROLLERS
                .iter()
                .copied()
                .filter(|c| {
                    wanted(c) && self.layout.hierarchy(c).is_some_and(|x| x.mount == h.mount)
                })
                .collect();
            // cpuacct has nothing to write but gives CPU time on v1.
            if !ctrls.is_empty() || h.has("cpuacct") {
                out.push((h, ctrls));
            }
        }
        if let Some(u) = &self.layout.unified {
            let ctrls = layout::CONTROLLERS
                .iter()
                .copied()
                .filter(|c| {
                    wanted(c)
                        && u.has(c)
                        && self.layout.hierarchy(c).is_some_and(|x| x.mount == u.mount)
                })
                .collect();
            out.push((u, ctrls));
        }
        out
    }

    /// All hierarchies a slice may exist in.
    fn all_hierarchies(&self) -> Vec<&Hierarchy> {
        self.layout
            .v1
            .iter()
            .chain(self.layout.unified.iter())
            .collect()
    }

    pub fn dir(&self, h: &Hierarchy, name: &SliceName) -> PathBuf {
        h.mount.join(&self.root).join(name.cgroup_path())
    }

    /// The slice's directory in the hierarchy that holds `controller`, if it exists.
    pub fn dir_for(&self, controller: &str, name: &SliceName) -> Option<PathBuf> {
        let h = self.layout.hierarchy(controller)?;
        let d = self.dir(h, name);
        d.is_dir().then_some(d)
    }

    /// The slice's directories that exist and carry bulkhead's mark.
    pub fn existing_dirs(&self, name: &SliceName) -> Vec<(&Hierarchy, PathBuf)> {
        self.all_hierarchies()
            .into_iter()
            .map(|h| (h, self.dir(h, name)))
            .filter(|(_, d)| d.is_dir() && mark::is_ours(d))
            .collect()
    }

    /// The `cgroup.procs` files of a slice in every hierarchy it exists in (for
    /// [`crate::run::spawn_joined`]).
    pub fn procs_files(&self, name: &SliceName) -> Vec<PathBuf> {
        self.existing_dirs(name)
            .into_iter()
            .map(|(_, d)| d.join("cgroup.procs"))
            .collect()
    }

    /// Slices bulkhead created that exist now, parents first.
    pub fn slices_on_system(&self) -> Vec<SliceName> {
        let Some(p) = self.layout.primary() else {
            return vec![];
        };
        let mut out = Vec::new();
        fn walk(dir: &Path, out: &mut Vec<SliceName>) {
            let Ok(rd) = fs::read_dir(dir) else { return };
            let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let n = e.file_name().to_string_lossy().into_owned();
                let path = e.path();
                if let Some(stem) = n.strip_suffix(".slice") {
                    if path.is_dir() && mark::is_ours(&path) {
                        if let Ok(name) = SliceName::parse(stem) {
                            out.push(name);
                            walk(&path, out);
                        }
                    }
                }
            }
        }
        walk(&p.mount.join(&self.root), &mut out);
        out.sort_by(|a, b| (a.depth(), a.as_str()).cmp(&(b.depth(), b.as_str())));
        out
    }

    fn foreign_state_file() -> PathBuf {
        runtime_dir().join("enabled-controllers")
    }

    fn foreign_state() -> Vec<(PathBuf, String)> {
        fs::read_to_string(Self::foreign_state_file())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (c, d) = l.split_once(' ')?;
                Some((PathBuf::from(d), c.to_string()))
            })
            // Cgroups removed since (a benchmark's root, say) need no bookkeeping.
            .filter(|(d, _)| d.is_dir())
            .collect()
    }

    fn save_foreign_state(entries: &[(PathBuf, String)]) {
        let f = Self::foreign_state_file();
        if entries.is_empty() {
            let _ = fs::remove_file(&f);
            return;
        }
        let _ = fs::create_dir_all(runtime_dir());
        let text: String = entries
            .iter()
            .map(|(d, c)| format!("{c} {}\n", d.display()))
            .collect();
        let _ = fs::write(f, text);
    }
}

/// Planning state: what files hold after the writes planned so far.
struct Planner {
    ops: Vec<Op>,
    errors: Vec<Diagnostic>,
    sim: HashMap<PathBuf, String>,
    created: HashSet<PathBuf>,
    foreign_enables: Vec<(PathBuf, String)>,
}

impl Planner {
    fn current(&self, path: &Path) -> Option<String> {
        if let Some(v) = self.sim.get(path) {
            return Some(v.clone());
        }
        let dir = path.parent()?;
        if self.created.contains(dir) {
            let f = path.file_name()?.to_str()?;
            return fresh_default(f).map(String::from);
        }
        fs::read_to_string(path).ok()
    }

    fn write(&mut self, dir: &Path, file: &str, value: String, why: String, optional: bool) {
        let path = dir.join(file);
        let restore = if self.created.contains(dir) {
            None
        } else {
            self.current(&path).map(|c| c.trim().to_string())
        };
        self.sim.insert(path.clone(), value.clone());
        self.ops.push(Op::Write {
            file: path,
            value,
            why,
            restore,
            optional,
        });
    }

    fn want(&mut self, dir: &Path, want: Want) {
        match want {
            Want::Value {
                file,
                value,
                why,
                cmp,
                optional,
                before,
            } => {
                let path = dir.join(&file);
                let cur = self.current(&path);
                if cur.as_deref().is_some_and(|c| same(cmp, c, &value)) {
                    return;
                }
                // A default for a file this kernel does not have.
                if optional && cur.is_none() {
                    return;
                }
                // cgroup v2 does not refuse a memory.max below current use: it OOM-kills
                // until the group fits. Refuse that here instead.
                if file == "memory.max" && !self.created.contains(dir) {
                    let used = fs::read_to_string(dir.join("memory.current"))
                        .ok()
                        .and_then(|c| c.trim().parse::<u64>().ok());
                    if let (Some(used), Ok(new)) = (used, value.parse::<u64>()) {
                        if new < used {
                            self.errors.push(
                                Diagnostic::error(format!(
                                    "{why} is below what the slice uses now ({}); cgroup v2 would OOM-kill processes to get there",
                                    bulkhead_sys::units::human_bytes(used)
                                ))
                                .at(dir.display().to_string())
                                .hint("raise the limit, or stop or move processes out of the slice first"),
                            );
                            return;
                        }
                    }
                }
                if let Some((bfile, bval)) = before {
                    let bcur = self.current(&dir.join(&bfile));
                    if !bcur.as_deref().is_some_and(|c| same(Cmp::Number, c, &bval))
                        && bcur.is_some()
                    {
                        self.write(dir, &bfile, bval, format!("room for {why}"), false);
                    }
                }
                self.write(dir, &file, value, why, optional);
            }
            Want::Lines {
                file,
                lines,
                why,
                reset,
            } => {
                let path = dir.join(&file);
                let Some(content) = self.current(&path) else {
                    if !lines.is_empty() {
                        // Let the write fail loudly: the plan asked for it.
                        for (k, l) in lines {
                            self.write(dir, &file, format!("{k} {l}"), why.clone(), false);
                        }
                    }
                    return;
                };
                let mut cur: BTreeMap<String, String> = keyed_lines(&content).into_iter().collect();
                for (k, l) in &lines {
                    if !same_line(reset, cur.get(k).map(String::as_str), l) {
                        let restore = cur
                            .get(k)
                            .map(|c| format!("{k} {c}"))
                            .unwrap_or_else(|| reset_line(reset, k));
                        let created = self.created.contains(dir);
                        self.ops.push(Op::Write {
                            file: path.clone(),
                            value: format!("{k} {l}"),
                            why: why.clone(),
                            restore: (!created).then_some(restore),
                            optional: false,
                        });
                        cur.insert(k.clone(), l.clone());
                    }
                }
                // Device entries the plan no longer has.
                let stale: Vec<String> = cur
                    .keys()
                    .filter(|k| k.contains(':') && !lines.iter().any(|(w, _)| w == *k))
                    .cloned()
                    .collect();
                for k in stale {
                    let old = cur.remove(&k).unwrap_or_default();
                    if same_line(reset, Some(&old), &reset_line(reset, &k)[k.len() + 1..]) {
                        continue;
                    }
                    self.ops.push(Op::Write {
                        file: path.clone(),
                        value: reset_line(reset, &k),
                        why: format!("{why} (removed from the plan)"),
                        restore: Some(format!("{k} {old}")),
                        optional: false,
                    });
                }
                let text: String = cur.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
                self.sim.insert(path, text);
            }
        }
    }

    /// Make sure `controller` is enabled for the children of every cgroup from the
    /// hierarchy's root down to `dir`.
    fn enable_down_to(&mut self, mount: &Path, dir: &Path, controller: &str) {
        let Ok(rel) = dir.strip_prefix(mount) else {
            return;
        };
        let mut chain = vec![mount.to_path_buf()];
        let mut cur = mount.to_path_buf();
        for c in rel.components() {
            cur.push(c);
            chain.push(cur.clone());
        }
        for d in chain {
            let f = d.join("cgroup.subtree_control");
            let content = if self.created.contains(&d) {
                self.sim.get(&f).cloned().unwrap_or_default()
            } else {
                self.sim
                    .get(&f)
                    .cloned()
                    .or_else(|| fs::read_to_string(&f).ok())
                    .unwrap_or_default()
            };
            if content.split_whitespace().any(|c| c == controller) {
                continue;
            }
            if !self.created.contains(&d) && !mark::is_ours(&d) {
                self.foreign_enables
                    .push((d.clone(), controller.to_string()));
            }
            self.sim.insert(f, format!("{content} {controller}"));
            self.ops.push(Op::Enable {
                dir: d,
                controller: controller.to_string(),
            });
        }
    }
}

fn read_idset(path: &Path) -> Option<IdSet> {
    IdSet::parse(fs::read_to_string(path).ok()?.trim()).ok()
}

fn pid1_is_systemd() -> bool {
    fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
}

impl Backend for CgroupFs {
    fn name(&self) -> &'static str {
        "cgroupfs"
    }

    fn describe(&self) -> String {
        format!(
            "cgroupfs backend, {}, slices under {}",
            self.layout.describe(),
            Path::new("/").join(&self.root).display()
        )
    }

    fn plan_apply(&self, plan: &ResolvedPlan) -> Result<Changes> {
        // A hierarchy stays in use while a slice exists there, so removing the last
        // AllowedCPUs or HugetlbMax from the plan resets the limits instead of leaving them.
        // v1: the slice exists in the controller's own hierarchy; v2: the controller's files
        // are present in the slice (it was enabled for it).
        let exists_in = |ctrl: &str, v2_file_prefix: &str| {
            self.layout.hierarchy(ctrl).is_some_and(|h| {
                plan.slices.iter().any(|s| {
                    let d = self.dir(h, s.name());
                    if !(d.is_dir() && mark::is_ours(&d)) {
                        return false;
                    }
                    match h.version {
                        Version::V1 => true,
                        Version::V2 => fs::read_dir(&d).is_ok_and(|rd| {
                            rd.filter_map(|e| e.ok()).any(|e| {
                                e.file_name().to_string_lossy().starts_with(v2_file_prefix)
                            })
                        }),
                    }
                })
            })
        };
        let uses_cpuset =
            plan.slices.iter().any(|s| s.uses_cpuset()) || exists_in("cpuset", "cpuset.");
        let uses_hugetlb = plan.slices.iter().any(|s| !s.hugetlb_max.is_empty())
            || exists_in("hugetlb", "hugetlb.");
        let hs = self.hierarchies(uses_cpuset, uses_hugetlb);
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        if pid1_is_systemd() {
            warnings.push(
                Diagnostic::warning(
                    "PID 1 is systemd: the cgroupfs backend writes under systemd's cgroup tree, which breaks systemd's single-writer rule; a daemon reload may undo these settings",
                )
                .hint("prefer the systemd backend on this host, or give bulkhead a delegated subtree with --cgroup-root"),
            );
        }
        for (h, _) in &hs {
            let root = h.mount.join(&self.root);
            if !root.is_dir() {
                errors.push(
                    Diagnostic::error(format!(
                        "the cgroup root does not exist in the {} hierarchy",
                        h.label()
                    ))
                    .at(root.display().to_string())
                    .hint("create it first, or leave out --cgroup-root"),
                );
            }
        }
        // Directives whose controller is not mounted at all.
        for s in &plan.slices {
            for (ctrl, used, what) in [
                (
                    "cpu",
                    s.cpu_weight.is_some() || s.cpu_max.is_some(),
                    "CPUWeight/CPUQuota",
                ),
                ("cpuset", s.uses_cpuset(), "AllowedCPUs/AllowedMemoryNodes"),
                (
                    "memory",
                    s.memory_max.is_some()
                        || s.memory_high.is_some()
                        || s.memory_low.is_some()
                        || s.memory_min.is_some()
                        || s.memory_swap_max.is_some(),
                    "Memory*",
                ),
                (
                    "io",
                    s.io_weight.is_some() || !s.io_max.is_empty() || !s.io_device_weight.is_empty(),
                    "IO*",
                ),
                ("pids", s.tasks_max.is_some(), "TasksMax"),
                ("hugetlb", !s.hugetlb_max.is_empty(), "HugetlbMax"),
            ] {
                if used && self.layout.hierarchy(ctrl).is_none() {
                    warnings.push(
                        Diagnostic::warning(format!("{what} is not applied: the {ctrl} controller is not available on this host"))
                            .context(format!("[slice.{}]", s.name()))
                            .hint(format!("mount or enable the {ctrl} controller")),
                    );
                }
            }
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }

        let caps = self.layout.caps();
        let swappiness = fs::read_to_string("/proc/sys/vm/swappiness")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(60);
        let mut p = Planner {
            ops: vec![],
            errors: vec![],
            sim: HashMap::new(),
            created: HashSet::new(),
            foreign_enables: vec![],
        };
        // The cpuset each slice holds on v1 when the plan leaves it open.
        let cpuset_root = self
            .layout
            .hierarchy("cpuset")
            .map(|h| h.mount.join(&self.root));
        let root_cpus = cpuset_root
            .as_ref()
            .and_then(|r| read_idset(&r.join("cpuset.cpus")))
            .unwrap_or_else(|| plan.host.cpus.clone());
        let root_mems = cpuset_root
            .as_ref()
            .and_then(|r| read_idset(&r.join("cpuset.mems")))
            .unwrap_or_else(|| plan.host.mem_nodes.clone());

        for s in &plan.slices {
            let name = s.name();
            let inherited = {
                let mut cpus = root_cpus.clone();
                let mut mems = root_mems.clone();
                for anc in name.lineage().iter().rev().skip(1) {
                    if let Some(a) = plan.slice(anc) {
                        if let Some(c) = &a.allowed_cpus {
                            cpus = c.clone();
                            break;
                        }
                    }
                }
                for anc in name.lineage().iter().rev().skip(1) {
                    if let Some(a) = plan.slice(anc) {
                        if let Some(m) = &a.allowed_mems {
                            mems = m.clone();
                            break;
                        }
                    }
                }
                (cpus, mems)
            };
            for (h, ctrls) in &hs {
                let dir = self.dir(h, name);
                if dir.is_dir() {
                    if !mark::is_ours(&dir) {
                        errors.push(
                            Diagnostic::error(format!("slice '{name}' exists but was not created by bulkhead; refusing to adopt it"))
                                .at(dir.display().to_string())
                                .hint("rename the slice in the plan, or remove that cgroup yourself if it is unused"),
                        );
                        continue;
                    }
                } else {
                    p.created.insert(dir.clone());
                    p.ops.push(Op::Mkdir { dir: dir.clone() });
                }
                if h.version == Version::V2 {
                    if let Some(parent) = dir.parent() {
                        for c in ctrls {
                            p.enable_down_to(&h.mount, parent, c);
                        }
                    }
                }
                let mut m = Mapper {
                    slice: s,
                    caps: &caps,
                    inherited_cpuset: inherited.clone(),
                    swappiness,
                    page_sizes: plan.host.hugepage_sizes.clone(),
                    wants: vec![],
                    warnings: vec![],
                };
                for c in ctrls {
                    m.map(c, h.version);
                }
                warnings.append(&mut m.warnings);
                for w in m.wants {
                    p.want(&dir, w);
                }
            }
        }
        errors.append(&mut p.errors);
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        // Slices from an earlier apply that the plan no longer has.
        for existing in self.slices_on_system() {
            if plan.slice(&existing).is_none() {
                warnings.push(
                    Diagnostic::note(format!("slice '{existing}' exists from an earlier apply but is not in this plan; it is left as it is"))
                        .hint(format!("remove it with: bulkhead destroy --slice {existing}")),
                );
            }
        }
        Ok(Changes {
            ops: p.ops,
            warnings,
            slices: plan.slices.iter().map(|s| s.name().to_string()).collect(),
            foreign_enables: p.foreign_enables,
            foreign_disables: vec![],
        })
    }

    fn plan_destroy(&self, slices: &[SliceName], kill: bool) -> Result<Changes> {
        let names = removal_order(slices, self.slices_on_system());
        let mut errors = Vec::new();
        let mut ops = Vec::new();
        let mut busy = Vec::new();
        let mut removed: HashSet<PathBuf> = HashSet::new();
        for name in &names {
            let mut dirs = Vec::new();
            for h in self.all_hierarchies() {
                let d = self.dir(h, name);
                if !d.is_dir() {
                    continue;
                }
                if !mark::is_ours(&d) {
                    errors.push(
                        Diagnostic::error(format!(
                            "slice '{name}' was not created by bulkhead; refusing to delete it"
                        ))
                        .at(d.display().to_string()),
                    );
                    continue;
                }
                // Sub-cgroups that are not bulkhead slices (made by someone else) block rmdir.
                if let Ok(rd) = fs::read_dir(&d) {
                    for e in rd.filter_map(|e| e.ok()) {
                        let p = e.path();
                        if p.is_dir() && !names.iter().any(|n| self.dir(h, n) == p) {
                            errors.push(
                                Diagnostic::error(format!("slice '{name}' contains the cgroup {} that bulkhead did not create", p.display()))
                                    .hint("move its processes out and remove it first"),
                            );
                        }
                    }
                }
                dirs.push(d);
            }
            let pids: Vec<i32> = {
                let mut v: Vec<i32> = dirs.iter().flat_map(|d| ops::procs(d)).collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            if kill && pids.contains(&(std::process::id() as i32)) {
                errors.push(
                    Diagnostic::error(format!(
                        "bulkhead itself runs in slice '{name}'; --kill would kill it halfway"
                    ))
                    .hint("run destroy from a shell outside the slice"),
                );
            }
            if !pids.is_empty() {
                busy.push(format!(
                    "{name} ({} process(es): {})",
                    pids.len(),
                    pids.iter()
                        .take(8)
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
                if kill {
                    ops.push(Op::Kill { dirs: dirs.clone() });
                }
            }
            for d in dirs {
                removed.insert(d.clone());
                ops.push(Op::Rmdir { dir: d });
            }
        }
        if !busy.is_empty() && !kill {
            errors.push(
                Diagnostic::error(format!("slices still have processes: {}", busy.join("; ")))
                    .hint(
                    "stop them, move them out with `bulkhead move`, or pass --kill to kill them",
                ),
            );
        }
        if !errors.is_empty() {
            return Err(Error::Invalid(errors));
        }
        // Put back controllers bulkhead enabled on cgroups it does not own, once nothing of
        // bulkhead's is left below them.
        let mut foreign_disables = Vec::new();
        for (dir, ctrl) in Self::foreign_state() {
            let left = fs::read_dir(&dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .any(|e| e.path().is_dir() && !removed.contains(&e.path()))
                })
                .unwrap_or(false);
            if !left && dir.is_dir() {
                ops.push(Op::Disable {
                    dir: dir.clone(),
                    controller: ctrl.clone(),
                });
                foreign_disables.push((dir, ctrl));
            }
        }
        Ok(Changes {
            ops,
            warnings: vec![],
            slices: names.iter().map(|n| n.to_string()).collect(),
            foreign_enables: vec![],
            foreign_disables,
        })
    }

    fn execute(&self, changes: &Changes) -> Result<Outcome> {
        let out = ops::execute(&changes.ops)?;
        if !changes.foreign_enables.is_empty() || !changes.foreign_disables.is_empty() {
            let mut state = Self::foreign_state();
            for e in &changes.foreign_enables {
                if !state.contains(e) {
                    state.push(e.clone());
                }
            }
            state.retain(|e| !changes.foreign_disables.contains(e));
            Self::save_foreign_state(&state);
        }
        Ok(out)
    }

    fn slices(&self) -> Vec<SliceName> {
        self.slices_on_system()
    }

    fn slice_exists(&self, slice: &SliceName) -> bool {
        !self.existing_dirs(slice).is_empty()
    }

    fn join(&self, slice: &SliceName) -> Result<()> {
        let dirs = self.existing_dirs(slice);
        if dirs.is_empty() {
            return Err(Error::invalid(
                Diagnostic::error(format!("slice '{slice}' does not exist")).context(MISSING_SLICE),
            ));
        }
        for (h, d) in dirs {
            ops::write_file(&d.join("cgroup.procs"), "0").map_err(|e| {
                let mut diag = Diagnostic::error(format!("cannot join slice '{slice}' in the {} hierarchy: {}", h.label(), errno_text(&e)))
                    .at(d.display().to_string());
                if e.raw_os_error() == Some(libc::EBUSY) && h.version == Version::V2 {
                    diag = diag.hint("on cgroup v2 processes can only join leaf slices (ones without child slices)");
                }
                Error::failed_with(diag)
            })?;
        }
        Ok(())
    }

    fn move_pid(&self, slice: &SliceName, pid: i32) -> std::result::Result<(), String> {
        let dirs = self.existing_dirs(slice);
        if dirs.is_empty() {
            return Err(format!("slice '{slice}' does not exist"));
        }
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let stat =
            fs::read_to_string(proc_dir.join("stat")).map_err(|_| "no such process".to_string())?;
        // Field 9 (flags) has PF_KTHREAD for kernel threads.
        let flags: u64 = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(6))
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        if flags & 0x0020_0000 != 0 {
            return Err("is a kernel thread; kernel threads cannot be moved".into());
        }
        let original = fs::read_to_string(proc_dir.join("cgroup")).unwrap_or_default();
        let mut moved: Vec<&Hierarchy> = Vec::new();
        for (h, d) in &dirs {
            if let Err(e) = ops::write_file(&d.join("cgroup.procs"), &pid.to_string()) {
                // Put it back where it was in the hierarchies already changed.
                for mh in moved {
                    if let Some(orig) = original_path(&original, mh) {
                        let _ = ops::write_file(
                            &mh.mount
                                .join(orig.trim_start_matches('/'))
                                .join("cgroup.procs"),
                            &pid.to_string(),
                        );
                    }
                }
                let why = match e.raw_os_error() {
                    Some(libc::ESRCH) => "no such process".to_string(),
                    Some(libc::EBUSY) if h.version == Version::V2 => {
                        format!(
                            "{}: on cgroup v2 processes can only join leaf slices",
                            errno_text(&e)
                        )
                    }
                    Some(libc::EINVAL) => format!(
                        "the {} hierarchy refused it ({}): real-time or kernel tasks cannot move",
                        h.label(),
                        errno_text(&e)
                    ),
                    _ => format!("the {} hierarchy refused it: {}", h.label(), errno_text(&e)),
                };
                return Err(why);
            }
            moved.push(h);
        }
        Ok(())
    }
}

/// The cgroup path of a process in one hierarchy, from /proc/PID/cgroup text.
pub fn original_path(proc_cgroup: &str, h: &Hierarchy) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let id = it.next()?;
        let ctrls = it.next()?;
        let path = it.next()?;
        let hit = match h.version {
            Version::V2 => id == "0" && ctrls.is_empty(),
            Version::V1 => ctrls.split(',').any(|c| h.has(c)),
        };
        hit.then(|| path.to_string())
    })
}
