//! The plan against the kubelet's configuration on the node: the cgroups systemReserved and
//! kubeReserved name, reservedSystemCPUs with the static CPU manager, the huge page pools the
//! node advertises to pods, and the kubelet's own cgroup tree. [`check`] is pure (its inputs
//! are [`KubeletConfig`], [`PlanFacts`], [`NodeFacts`] and a cgroup lookup) and returns one
//! human warning per disagreement; [`load`] is the only function here that reads a file.

use bulkhead::plan::hugepages::Amount;
use bulkhead::plan::{Plan, Value};
use bulkhead::units::IdSet;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

/// Where kubeadm writes the kubelet's configuration.
pub const DEFAULT_PATH: &str = "/var/lib/kubelet/config.yaml";
/// The largest configuration file [`load`] reads (a real one is a few kilobytes).
pub const MAX_CONFIG: u64 = 1 << 20;

/// The directives that limit or weigh CPU, memory, tasks or huge pages.
pub const LIMITS: [&str; 9] = [
    "CPUWeight",
    "CPUQuota",
    "MemoryMin",
    "MemoryLow",
    "MemoryHigh",
    "MemoryMax",
    "MemorySwapMax",
    "TasksMax",
    "HugetlbMax",
];

/// The fields of a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) this check reads;
/// every other field is ignored, every field may be missing.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletConfig {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    /// `systemd` or `cgroupfs` (the kubelet's default).
    pub cgroup_driver: Option<String>,
    pub cgroup_root: Option<String>,
    #[serde(rename = "cgroupsPerQOS")]
    pub cgroups_per_qos: Option<bool>,
    /// Resource name -> quantity: `{cpu: "500m", memory: "1Gi"}`.
    #[serde(deserialize_with = "quantities")]
    pub system_reserved: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "quantities")]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    pub system_reserved_cgroup: Option<String>,
    pub kube_reserved_cgroup: Option<String>,
    /// `pods`, `system-reserved`, `kube-reserved` (and their `-compressible` forms), `none`.
    pub enforce_node_allocatable: Option<Vec<String>>,
    /// A cpuset list, `0-1,4`.
    #[serde(rename = "reservedSystemCPUs")]
    pub reserved_system_cpus: Option<String>,
    /// `none` (the default) or `static`.
    pub cpu_manager_policy: Option<String>,
    /// Kubernetes 1.35+ (KEP-5573): the kubelet refuses a cgroup v1 node unless false.
    #[serde(rename = "failCgroupV1")]
    pub fail_cgroup_v1: Option<bool>,
}

/// A quantity as YAML writes it: a string, or a bare number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Int(i64),
    Float(f64),
}

fn quantities<'de, D>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let m: Option<BTreeMap<String, Scalar>> = Option::deserialize(d)?;
    Ok(m.map(|m| {
        m.into_iter()
            .map(|(k, v)| {
                let v = match v {
                    Scalar::Text(s) => s,
                    Scalar::Int(i) => i.to_string(),
                    Scalar::Float(f) => f.to_string(),
                };
                (k, v)
            })
            .collect()
    }))
}

impl KubeletConfig {
    /// Parse the configuration file's text (YAML, or JSON, which is YAML).
    pub fn parse(text: &str) -> Result<KubeletConfig, String> {
        let cfg: KubeletConfig =
            serde_saphyr::from_str(text).map_err(|e| format!("not a KubeletConfiguration: {e}"))?;
        if let Some(k) = cfg.kind.as_deref().filter(|k| *k != "KubeletConfiguration") {
            return Err(format!("kind is {k}, not KubeletConfiguration"));
        }
        if let Some(v) = cfg
            .api_version
            .as_deref()
            .filter(|v| !v.starts_with("kubelet.config.k8s.io/"))
        {
            return Err(format!(
                "apiVersion is {v}, not kubelet.config.k8s.io/v1beta1"
            ));
        }
        Ok(cfg)
    }

    /// The kubelet names cgroups the systemd way (`system.slice`).
    pub fn systemd(&self) -> bool {
        self.cgroup_driver
            .as_deref()
            .is_some_and(|d| d.trim().eq_ignore_ascii_case("systemd"))
    }

    fn enforces(&self, key: &str) -> bool {
        self.enforce_node_allocatable
            .iter()
            .flatten()
            .any(|k| k.trim() == key)
    }

    fn static_cpus(&self) -> bool {
        self.cpu_manager_policy
            .as_deref()
            .is_some_and(|p| p.trim().eq_ignore_ascii_case("static"))
    }
}

/// Read and parse the kubelet's configuration file; every error names the file.
pub fn load(path: &Path) -> Result<KubeletConfig, String> {
    let name = path.display();
    let file = std::fs::File::open(path)
        .map_err(|e| format!("{name}: cannot read the kubelet's configuration: {e}"))?;
    let mut text = String::new();
    file.take(MAX_CONFIG + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{name}: cannot read the kubelet's configuration: {e}"))?;
    if text.len() as u64 > MAX_CONFIG {
        return Err(format!(
            "{name}: more than {MAX_CONFIG} bytes; a kubelet configuration is a few kilobytes, so it is not read"
        ));
    }
    KubeletConfig::parse(&text).map_err(|e| format!("{name}: {e}"))
}

/// Whether the cgroup `path` (as [`cgroup_path`] writes it) is a directory below the cgroup
/// file system mounted at `mount`: the lookup [`check`] takes, on a real node.
pub fn cgroup_dir_exists(mount: &Path, path: &str) -> bool {
    !path.split('/').any(|c| c == "..") && mount.join(path).is_dir()
}

/// One slice of the plan, as the kubelet would name its cgroup.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SliceFacts {
    /// `db-server`.
    pub name: String,
    /// Below the cgroup mount: `db.slice/db-server.slice`.
    pub path: String,
    pub allowed_cpus: Option<IdSet>,
    /// The [`LIMITS`] directives the slice sets.
    pub limits: BTreeSet<String>,
}

/// What of a plan the kubelet's configuration can disagree with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanFacts {
    /// Every slice, the implicit parents too (the plan makes them).
    pub slices: Vec<SliceFacts>,
    /// Huge page size in bytes -> the pages the plan's pools hold. Pools set per NUMA node
    /// count as their sum; a pool given as a share of RAM counts only when RAM is known.
    pub hugepages: BTreeMap<u64, u64>,
}

impl PlanFacts {
    /// From the parsed plan. `cgroup_root` is where the agent makes the slices (its
    /// `--cgroup-root`); `ram` (bytes) turns pools written as a share of RAM into pages.
    pub fn from_plan(plan: &Plan, cgroup_root: &str, ram: Option<u64>) -> PlanFacts {
        let root = components(cgroup_root);
        let slices = plan
            .slices
            .values()
            .map(|s| {
                let rel = s.name.cgroup_path().to_string_lossy().into_owned();
                let path = if root.is_empty() {
                    rel
                } else {
                    format!("{root}/{rel}")
                };
                let allowed_cpus = match s.directives.get("AllowedCPUs").map(|a| &a.value) {
                    Some(Value::Ids(ids)) => Some(ids.clone()),
                    _ => None,
                };
                let limits = LIMITS
                    .iter()
                    .filter(|d| s.directives.contains_key(*d))
                    .map(|d| d.to_string())
                    .collect();
                SliceFacts {
                    name: s.name.as_str().to_string(),
                    path,
                    allowed_cpus,
                    limits,
                }
            })
            .collect();
        PlanFacts {
            slices,
            hugepages: pools(plan, ram),
        }
    }

    fn slice_at(&self, path: &str) -> Option<&SliceFacts> {
        self.slices.iter().find(|s| s.path == path)
    }
}

fn pools(plan: &Plan, ram: Option<u64>) -> BTreeMap<u64, u64> {
    let mut out: BTreeMap<u64, Option<u64>> = BTreeMap::new();
    for p in plan.hugepages.iter().flat_map(|h| &h.pools) {
        let pages = match p.amount {
            _ if p.size == 0 => None,
            Amount::Pages(n) => Some(n),
            Amount::Bytes(b) => Some(b / p.size),
            Amount::Percent(f) => ram.map(|r| (r as f64 * f) as u64 / p.size),
        };
        let e = out.entry(p.size).or_insert(Some(0));
        *e = e.zip(pages).map(|(a, b)| a.saturating_add(b));
    }
    out.into_iter()
        .filter_map(|(size, pages)| Some((size, pages?)))
        .collect()
}

/// What the node tells the scheduler.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFacts {
    /// Page size in bytes -> bytes of `hugepages-<size>` (status.capacity, else allocatable).
    pub hugepages: BTreeMap<u64, u64>,
    /// status.capacity memory, in bytes.
    pub memory: Option<u64>,
}

impl NodeFacts {
    pub fn from_node(node: &Node) -> NodeFacts {
        let status = node.status.as_ref();
        NodeFacts::from_resources(
            status.and_then(|s| s.capacity.as_ref()),
            status.and_then(|s| s.allocatable.as_ref()),
        )
    }

    /// From status.capacity and status.allocatable; quantities that do not parse are left out.
    pub fn from_resources(
        capacity: Option<&BTreeMap<String, Quantity>>,
        allocatable: Option<&BTreeMap<String, Quantity>>,
    ) -> NodeFacts {
        let mut hugepages = BTreeMap::new();
        for m in [allocatable, capacity].into_iter().flatten() {
            for (k, q) in m {
                let size = k.strip_prefix("hugepages-").and_then(parse_quantity);
                if let Some((size, bytes)) = size.zip(parse_quantity(&q.0)) {
                    hugepages.insert(size, bytes);
                }
            }
        }
        let memory = capacity
            .and_then(|c| c.get("memory"))
            .and_then(|q| parse_quantity(&q.0));
        NodeFacts { hugepages, memory }
    }
}

/// A Kubernetes quantity (`500m`, `1Gi`, `2M`, `1e3`, `0.5Ki`) as a whole number, rounded
/// up as the kubelet's `Value()` does. `None` for what is not a quantity, negative or more
/// than a u64 holds.
pub fn parse_quantity(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(end);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') || num.len() > 30 {
        return None;
    }
    let mantissa: u128 = format!("{int}{frac}").parse().ok()?;
    let (binary, exp10) = suffix_scale(suffix)?;
    let exp10 = exp10.checked_sub(i32::try_from(frac.len()).ok()?)?;
    let v = mantissa.checked_mul(binary)?;
    let v = if exp10 >= 0 {
        v.checked_mul(10u128.checked_pow(exp10.unsigned_abs())?)?
    } else {
        match 10u128.checked_pow(exp10.unsigned_abs()) {
            Some(d) => v.div_ceil(d),
            None => u128::from(v > 0),
        }
    };
    u64::try_from(v).ok()
}

/// A suffix as (binary multiplier, power of ten).
fn suffix_scale(suffix: &str) -> Option<(u128, i32)> {
    let bin = |k: u32| Some((1u128 << (10 * k), 0));
    let dec = |e: i32| Some((1u128, e));
    match suffix {
        "Ki" => bin(1),
        "Mi" => bin(2),
        "Gi" => bin(3),
        "Ti" => bin(4),
        "Pi" => bin(5),
        "Ei" => bin(6),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "" => dec(0),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        _ => {
            let e = suffix.strip_prefix(['e', 'E'])?;
            let e: i32 = e.parse().ok()?;
            (-60..=60).contains(&e).then_some((1, e))
        }
    }
}

/// The cgroup a kubelet setting names, below the cgroup mount, as the kubelet resolves it:
/// with the systemd driver the last part is a slice name whose `-`s nest
/// (`/db-server.slice` and `db-server` are `db.slice/db-server.slice`); with cgroupfs it is
/// a path. `None` for the root or an empty setting.
pub fn cgroup_path(name: &str, systemd: bool) -> Option<String> {
    if !systemd {
        let p = components(name);
        return (!p.is_empty()).then_some(p);
    }
    let base = name.trim().trim_end_matches('/').rsplit('/').next()?;
    let base = base.strip_suffix(".slice").unwrap_or(base);
    let parts: Vec<&str> = base.split('-').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return None;
    }
    let units: Vec<String> = (1..=parts.len())
        .map(|n| format!("{}.slice", parts[..n].join("-")))
        .collect();
    Some(units.join("/"))
}

/// A cgroupfs path without empty or `.` parts: `/a//b/` is `a/b`.
fn components(p: &str) -> String {
    p.trim()
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// One of the kubelet's two reservations.
struct Reservation<'a> {
    /// `system-reserved`
    key: &'static str,
    /// `systemReserved`
    field: &'static str,
    cgroup: Option<&'a str>,
    reserved: Option<&'a BTreeMap<String, String>>,
}

impl Reservation<'_> {
    fn cgroup_field(&self) -> String {
        format!("{}Cgroup", self.field)
    }
    fn enforced(&self, cfg: &KubeletConfig) -> bool {
        cfg.enforces(self.key) || cfg.enforces(&format!("{}-compressible", self.key))
    }
    /// The directives the kubelet writes into the cgroup, with the resource each comes from.
    fn writes(&self, cfg: &KubeletConfig) -> Vec<(&'static str, String)> {
        let compressible_only = !cfg.enforces(self.key);
        let mut out = Vec::new();
        for k in self.reserved.iter().flat_map(|m| m.keys()) {
            let d = match k.as_str() {
                "cpu" => "CPUWeight",
                "memory" if !compressible_only => "MemoryMax",
                "pid" if !compressible_only => "TasksMax",
                h if h.starts_with("hugepages-") && !compressible_only => "HugetlbMax",
                _ => continue,
            };
            out.push((d, format!("{} {k}", self.field)));
        }
        out
    }
}

fn reservations(cfg: &KubeletConfig) -> [Reservation<'_>; 2] {
    [
        Reservation {
            key: "system-reserved",
            field: "systemReserved",
            cgroup: cfg.system_reserved_cgroup.as_deref(),
            reserved: cfg.system_reserved.as_ref(),
        },
        Reservation {
            key: "kube-reserved",
            field: "kubeReserved",
            cgroup: cfg.kube_reserved_cgroup.as_deref(),
            reserved: cfg.kube_reserved.as_ref(),
        },
    ]
}

/// Where the kubelet's configuration and the plan disagree, one warning each: what, where
/// (the kubelet's field, the plan's slice and directive) and what to do. `cgroup_exists`
/// answers for a path as [`cgroup_path`] writes it.
pub fn check(
    cfg: &KubeletConfig,
    plan: &PlanFacts,
    node: &NodeFacts,
    cgroup_exists: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let mut w = Vec::new();
    for r in reservations(cfg) {
        reserved_cgroup(cfg, &r, plan, cgroup_exists, &mut w);
    }
    reserved_cpus(cfg, plan, &mut w);
    hugepages(plan, node, &mut w);
    under_cgroup_root(cfg, plan, &mut w);
    w
}

/// Checks a, b and c: the cgroup a reservation names exists, the plan does not set there
/// what the kubelet writes, and an enforced reservation names one.
fn reserved_cgroup(
    cfg: &KubeletConfig,
    r: &Reservation,
    plan: &PlanFacts,
    exists: &dyn Fn(&str) -> bool,
    w: &mut Vec<String>,
) {
    let field = r.cgroup_field();
    let named = r.cgroup.map(str::trim).filter(|c| !c.is_empty());
    let Some(named) = named else {
        if r.enforced(cfg) {
            w.push(format!(
                "the kubelet's enforceNodeAllocatable has {} but {field} is empty: the kubelet refuses to start so; set {field} to the cgroup that holds those processes, or take {} out of enforceNodeAllocatable",
                r.key, r.key
            ));
        }
        return;
    };
    let Some(path) = cgroup_path(named, cfg.systemd()) else {
        return;
    };
    match plan.slice_at(&path) {
        Some(s) => fight(cfg, r, s, named, w),
        None if !exists(&path) => w.push(format!(
            "the kubelet's {field} = {named} names the cgroup {path}, which does not exist on this node and is no slice of the plan: the kubelet fails when a reserved cgroup does not exist; add the slice to the plan, create it, or correct {field}"
        )),
        None => {}
    }
}

fn fight(cfg: &KubeletConfig, r: &Reservation, s: &SliceFacts, named: &str, w: &mut Vec<String>) {
    if !r.enforced(cfg) {
        return;
    }
    let both: Vec<(&str, String)> = r
        .writes(cfg)
        .into_iter()
        .filter(|(d, _)| s.limits.contains(*d))
        .collect();
    if both.is_empty() {
        return;
    }
    let from: Vec<String> = both.iter().map(|(d, f)| format!("{d} from {f}")).collect();
    let dirs: Vec<&str> = both.iter().map(|(d, _)| *d).collect();
    w.push(format!(
        "the kubelet enforces {} on {} = {named}, which is the plan's slice {}: the kubelet writes {} there and the plan sets {}, so each overwrites the other and the agent reports the kubelet's values as drift; remove {} from slice {}, or take {} out of enforceNodeAllocatable",
        r.key,
        r.cgroup_field(),
        s.name,
        from.join(", "),
        dirs.join(", "),
        dirs.join(", "),
        s.name,
        r.key
    ));
}

/// Check d: with the static CPU manager, the plan's AllowedCPUs stay inside
/// reservedSystemCPUs (the CPUs the kubelet never hands to a Guaranteed pod).
fn reserved_cpus(cfg: &KubeletConfig, plan: &PlanFacts, w: &mut Vec<String>) {
    if !cfg.static_cpus() {
        return;
    }
    let pinned: Vec<(&SliceFacts, &IdSet)> = plan
        .slices
        .iter()
        .filter_map(|s| Some((s, s.allowed_cpus.as_ref()?)))
        .collect();
    if pinned.is_empty() {
        return;
    }
    let text = cfg.reserved_system_cpus.as_deref().map(str::trim);
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        let list: Vec<String> = pinned
            .iter()
            .map(|(s, c)| format!("{} {c}", s.name))
            .collect();
        w.push(format!(
            "the kubelet's cpuManagerPolicy is static and reservedSystemCPUs is not set: the CPUs it gives Guaranteed pods exclusively can be any of the node's, so the plan's AllowedCPUs ({}) may share them with those pods; set reservedSystemCPUs to a set that holds the plan's AllowedCPUs",
            list.join("; ")
        ));
        return;
    };
    let reserved = match IdSet::parse(text) {
        Ok(r) => r,
        Err(e) => {
            w.push(format!(
                "the kubelet's reservedSystemCPUs = {text} is not a CPU list ({e}); the plan's AllowedCPUs cannot be checked against it"
            ));
            return;
        }
    };
    for (s, cpus) in pinned {
        let outside = IdSet(cpus.0.difference(&reserved.0).copied().collect());
        if !outside.0.is_empty() {
            w.push(format!(
                "slice {}: AllowedCPUs = {cpus} has CPUs {outside} outside the kubelet's reservedSystemCPUs = {reserved}: with cpuManagerPolicy static the kubelet gives those CPUs to Guaranteed pods exclusively, and the slice's processes would share them; narrow AllowedCPUs to {reserved}, or add {outside} to reservedSystemCPUs (then remove /var/lib/kubelet/cpu_manager_state and restart the kubelet)",
                s.name
            ));
        }
    }
}

/// Check e: the huge pages the node advertises match the plan's pools.
fn hugepages(plan: &PlanFacts, node: &NodeFacts, w: &mut Vec<String>) {
    for (&size, &pages) in &plan.hugepages {
        let want = pages.saturating_mul(size);
        let have = node.hugepages.get(&size).copied().unwrap_or(0);
        if have == want {
            continue;
        }
        let res = format!("hugepages-{}", k8s_size(size));
        let what = if have > want {
            "pods scheduled against the difference can fail with SIGBUS when they touch it (kubernetes#71233)"
        } else {
            "pods cannot request the difference"
        };
        w.push(format!(
            "the node advertises {} of {res} but the plan's [hugepages] pool holds {} ({pages} pages): {what}; the kubelet reads the pools when it starts, so restart the kubelet after the plan applies, or preallocate the pool at boot (hugepages= on the kernel command line)",
            k8s_size(have),
            k8s_size(want)
        ));
    }
}

/// What the agent says on a node whose cgroups are not pure v2 (`layout`: `hybrid`, `v1`):
/// Kubernetes 1.35 and later refuse such a node by default (KEP-5573, `failCgroupV1`), and
/// what this node's kubelet configuration says about it. None on a pure v2 node.
pub fn cgroup_v1_notice(layout: &str, cfg: Option<&KubeletConfig>) -> Option<String> {
    if layout == "v2" {
        return None;
    }
    let kubelet = match cfg.map(|c| c.fail_cgroup_v1) {
        Some(Some(false)) => "this kubelet's configuration sets failCgroupV1: false, so it starts here; v1 is in maintenance mode and will be removed".to_string(),
        Some(Some(true)) => "this kubelet's configuration sets failCgroupV1: true: a kubelet 1.35+ refuses to start here".to_string(),
        Some(None) => "this kubelet's configuration does not set failCgroupV1: a kubelet 1.35+ refuses to start here (older ones warn)".to_string(),
        None => "the kubelet's configuration was not read".to_string(),
    };
    Some(format!(
        "this node's cgroups are {layout} (cgroup v1 controllers): Kubernetes 1.35 and later refuse cgroup v1 nodes unless the kubelet sets failCgroupV1: false (KEP-5573), systemd 258 dropped v1 and containerd 2.2 deprecates it; {kubelet}. Move the node to cgroup v2 (boot with systemd.unified_cgroup_hierarchy=1 where systemd still offers a choice); bulkhead works on both"
    ))
}

/// Check f: no plan slice lies inside the kubelet's cgroupRoot.
fn under_cgroup_root(cfg: &KubeletConfig, plan: &PlanFacts, w: &mut Vec<String>) {
    let raw = cfg.cgroup_root.as_deref().unwrap_or("");
    let Some(root) = cgroup_path(raw, cfg.systemd()) else {
        return;
    };
    let inside = |p: &str| p == root || p.starts_with(&format!("{root}/"));
    for s in plan.slices.iter().filter(|s| inside(&s.path)) {
        w.push(format!(
            "slice {} ({}) is inside the kubelet's cgroupRoot = {raw}, the tree where the kubelet makes and removes the pods' cgroups; move the slice out of {root}",
            s.name, s.path
        ));
    }
}

/// Bytes as Kubernetes writes them: `2Mi`, `1Gi`, `0`.
fn k8s_size(b: u64) -> String {
    for (shift, suffix) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if b != 0 && b.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", b >> shift);
        }
    }
    b.to_string()
}

#[cfg(test)]
mod tests;
