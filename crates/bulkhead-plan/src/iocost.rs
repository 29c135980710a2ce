//! The `[iocost]` section: io.cost, the kernel's proportional I/O controller, switched on for
//! the database's disks with QoS targets and a cost model. bulkhead's own host-level setting
//! (systemd has none); what it writes are the cgroup2 root's `io.cost.qos` and
//! `io.cost.model`, one line per disk. With io.cost on a disk, `IOWeight` shares it by weight
//! whatever its scheduler (`none` on NVMe and virtio disks, where it does nothing otherwise).
//!
//! ```toml
//! [iocost]
//! devices = ["/var/lib/postgresql"]   # disks, or paths on them (as IO* directives take them)
//! rlat = "5ms"      # QoS (io.cost.qos): read latency target at the rpct percentile; when
//! wlat = "10ms"     # any QoS key is given: ctrl=user, rpct/wpct 95, wlat = rlat, min 50%,
//! rpct = 95         # max 150% unless given. With none: ctrl=auto (the kernel's for the disk)
//! wpct = 95
//! min = "50%"       # how far io.cost may scale the disk's model down ...
//! max = "150%"      # ... and up (vrate)
//! model = "auto"    # io.cost.model: "auto" (the kernel's), or the linear coefficients
//!                   # { rbps = 125000000, rseqiops = 30000, rrandiops = 30000, wbps = ...,
//!                   #   wseqiops = ..., wrandiops = ... }, as `bulkhead iocost calibrate`
//!                   # prints them; left out, io.cost.model is not touched
//! ```

use crate::values::Ctx;
use crate::{Loc, Source};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::host::{DevNum, Host};
use bulkhead_sys::units::{parse_duration, parse_percent, parse_size};
use std::time::Duration;
use toml::de::DeValue;
use toml::Spanned;

/// io.cost's QoS parameters (io.cost.qos). All None: `ctrl=auto`.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Qos {
    /// Read latency percentile, 0..100.
    pub rpct: Option<f64>,
    pub rlat: Option<Duration>,
    pub wpct: Option<f64>,
    pub wlat: Option<Duration>,
    /// vrate bounds as fractions (0.5 for "50%").
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// The linear cost model's coefficients (io.cost.model `ctrl=user model=linear`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Coefs {
    pub rbps: u64,
    pub rseqiops: u64,
    pub rrandiops: u64,
    pub wbps: u64,
    pub wseqiops: u64,
    pub wrandiops: u64,
}

impl Coefs {
    pub const KEYS: [&'static str; 6] = [
        "rbps",
        "rseqiops",
        "rrandiops",
        "wbps",
        "wseqiops",
        "wrandiops",
    ];

    pub fn values(&self) -> [u64; 6] {
        [
            self.rbps,
            self.rseqiops,
            self.rrandiops,
            self.wbps,
            self.wseqiops,
            self.wrandiops,
        ]
    }

    /// `rbps=... rseqiops=... ...` as io.cost.model takes them.
    pub fn line(&self) -> String {
        Coefs::KEYS
            .iter()
            .zip(self.values())
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// As a plan value: `{ rbps = 1, ... }`.
    pub fn toml(&self) -> String {
        let items: Vec<String> = Coefs::KEYS
            .iter()
            .zip(self.values())
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        format!("{{ {} }}", items.join(", "))
    }
}

/// What the section says about io.cost.model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "coefs")]
pub enum Model {
    /// Not named: io.cost.model is left as it is.
    Keep,
    /// The kernel's own model for the disk (`ctrl=auto`).
    Auto,
    Linear(Coefs),
}

/// The `[iocost]` section, checked (not yet resolved against a host).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct IocostSpec {
    #[serde(skip)]
    pub loc: Loc,
    /// Device arguments, with where each is written.
    pub devices: Vec<(String, Loc)>,
    pub qos: Qos,
    pub model: Model,
}

const KEYS: &[&str] = &[
    "devices", "rpct", "rlat", "wpct", "wlat", "min", "max", "model",
];

/// The section for one host: which disks, and the exact lines for the two root files.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ResolvedIocost {
    pub devices: Vec<IocostDevice>,
    /// After `MAJ:MIN `: `enable=1 ctrl=auto`, or `enable=1 ctrl=user rpct=95.00 ...`.
    pub qos: String,
    /// After `MAJ:MIN `: `ctrl=auto`, `ctrl=user model=linear rbps=...`, or None (untouched).
    pub model: Option<String>,
    /// The section as written, for `plan show`.
    #[serde(skip)]
    pub spec_toml: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IocostDevice {
    pub dev: DevNum,
    /// The plan's argument.
    pub path: String,
    /// How it led to the disk (`device 254:0: /var/lib/postgresql on ext4 of vda (254:0)`).
    pub how: String,
}

impl Qos {
    fn user(&self) -> bool {
        *self != Qos::default()
    }

    /// The io.cost.qos line after `MAJ:MIN `, as the kernel prints it back.
    pub fn line(&self) -> String {
        if !self.user() {
            return "enable=1 ctrl=auto".into();
        }
        let pct = |p: f64| format!("{p:.2}");
        let rlat = self.rlat.unwrap_or(Duration::from_millis(5));
        let us = |d: Duration| d.as_micros().max(1).to_string();
        format!(
            "enable=1 ctrl=user rpct={} rlat={} wpct={} wlat={} min={} max={}",
            pct(self.rpct.unwrap_or(95.0)),
            us(rlat),
            pct(self.wpct.unwrap_or(95.0)),
            us(self.wlat.unwrap_or(rlat)),
            pct(self.min.unwrap_or(0.5) * 100.0),
            pct(self.max.unwrap_or(1.5) * 100.0),
        )
    }
}

impl Model {
    pub fn line(&self) -> Option<String> {
        match self {
            Model::Keep => None,
            Model::Auto => Some("ctrl=auto".into()),
            Model::Linear(c) => Some(format!("ctrl=user model=linear {}", c.line())),
        }
    }
}

/// The readers only `[iocost]` needs.
impl Ctx<'_> {
    fn pct(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<f64> {
        let n = match v {
            DeValue::Integer(i) => i.as_str().parse::<f64>().ok(),
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            DeValue::String(s) => s.trim().trim_end_matches('%').parse::<f64>().ok(),
            _ => None,
        };
        match n {
            Some(p) if (0.0..=100.0).contains(&p) => Some(p),
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a percentile from 0 to 100"),
                    "write e.g. 95 (the latency target holds for 95% of the I/Os)",
                );
                None
            }
        }
    }

    fn latency(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<Duration> {
        let s = self.string(loc, key, v)?;
        match parse_duration(&s) {
            Ok(d) if d >= Duration::from_micros(1) && d <= Duration::from_secs(10) => Some(d),
            Ok(_) => {
                self.err(
                    loc,
                    key,
                    format!("{key} = {s} is outside 1us..10s"),
                    "write the latency the disk should keep to, e.g. \"5ms\" (NVMe: 1-5ms, SATA SSD: 10-25ms, disks: 100-250ms)",
                );
                None
            }
            Err(m) => {
                self.err(loc, key, format!("{key} = {s}: {m}"), "write e.g. \"5ms\"");
                None
            }
        }
    }

    /// min/max: a share of the model's rate, 1%..10000% as the kernel takes it.
    fn vrate(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<f64> {
        let s = self.string(loc, key, v)?;
        match parse_percent(&s) {
            Some(Ok(f)) if (0.01..=100.0).contains(&f) => Some(f),
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} = {s} is not a percentage from 1% to 10000%"),
                    "write e.g. min = \"50%\" and max = \"150%\" (how far io.cost may scale the model's rate)",
                );
                None
            }
        }
    }

    fn model(&mut self, loc: Loc, v: &DeValue<'_>) -> Option<Model> {
        const HINT: &str = "write model = \"auto\", or the six linear coefficients { rbps = ..., rseqiops = ..., rrandiops = ..., wbps = ..., wseqiops = ..., wrandiops = ... } (`bulkhead iocost calibrate PATH` measures them)";
        if let DeValue::String(s) = v {
            if s.as_ref() == "auto" {
                return Some(Model::Auto);
            }
            self.err(
                loc,
                "model",
                format!("model = \"{s}\" is not a model"),
                HINT,
            );
            return None;
        }
        let Some(t) = v.as_table() else {
            self.err(
                loc,
                "model",
                "model must be \"auto\" or a table".into(),
                HINT,
            );
            return None;
        };
        let mut got: [Option<u64>; 6] = [None; 6];
        for (k, val) in t.iter() {
            let key = k.get_ref().as_ref();
            let Some(i) = Coefs::KEYS.iter().position(|c| *c == key) else {
                self.err(loc, "model", format!("unknown coefficient '{key}'"), HINT);
                return None;
            };
            let n = match val.get_ref() {
                DeValue::Integer(n) => n.as_str().replace('_', "").parse::<u64>().ok(),
                DeValue::String(s) => parse_size(s, 1000).ok(),
                _ => None,
            };
            match n {
                Some(n) if n > 0 => got[i] = Some(n),
                _ => {
                    self.err(
                        loc,
                        "model",
                        format!("{key} must be a positive whole number (bytes/s or IO/s)"),
                        HINT,
                    );
                    return None;
                }
            }
        }
        let missing: Vec<&str> = Coefs::KEYS
            .iter()
            .zip(got)
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| *k)
            .collect();
        if !missing.is_empty() {
            self.err(
                loc,
                "model",
                format!("the linear model lacks {}", missing.join(", ")),
                HINT,
            );
            return None;
        }
        let g = got.map(|v| v.unwrap_or(1));
        Some(Model::Linear(Coefs {
            rbps: g[0],
            rseqiops: g[1],
            rrandiops: g[2],
            wbps: g[3],
            wseqiops: g[4],
            wrandiops: g[5],
        }))
    }
}

/// Parse the value of the top-level `iocost` key.
pub(crate) fn parse(
    source: &Source,
    key_start: usize,
    value: &Spanned<DeValue<'_>>,
    errors: &mut Vec<Diagnostic>,
) -> Option<IocostSpec> {
    let loc = source.loc(key_start);
    let mut cx = Ctx {
        source,
        section: "[iocost]".into(),
        errors,
    };
    let Some(table) = value.get_ref().as_table() else {
        cx.err(
            loc,
            "",
            "'iocost' must be a table".into(),
            "write [iocost] on its own line, then devices = [\"/var/lib/postgresql\"]",
        );
        return None;
    };
    let before = cx.errors.len();
    let mut spec = IocostSpec {
        loc,
        devices: vec![],
        qos: Qos::default(),
        model: Model::Keep,
    };
    for (k, v) in table.iter() {
        let kloc = source.loc(k.span().start);
        let key = k.get_ref().as_ref();
        let val = v.get_ref();
        match key {
            "devices" => {
                for d in cx.strings(kloc, key, val).unwrap_or_default() {
                    if !d.starts_with('/') {
                        cx.err(
                            kloc,
                            key,
                            format!("'{d}' is not an absolute path"),
                            "name a disk (/dev/nvme0n1) or a path on it (/var/lib/postgresql)",
                        );
                        continue;
                    }
                    spec.devices.push((d, kloc));
                }
            }
            "rpct" => spec.qos.rpct = cx.pct(kloc, key, val),
            "wpct" => spec.qos.wpct = cx.pct(kloc, key, val),
            "rlat" => spec.qos.rlat = cx.latency(kloc, key, val),
            "wlat" => spec.qos.wlat = cx.latency(kloc, key, val),
            "min" => spec.qos.min = cx.vrate(kloc, key, val),
            "max" => spec.qos.max = cx.vrate(kloc, key, val),
            "model" => spec.model = cx.model(kloc, val).unwrap_or(Model::Keep),
            other => {
                let names: Vec<String> = KEYS.iter().map(|s| s.to_string()).collect();
                let hint = match crate::nearest(other, &names) {
                    Some(s) => format!("did you mean {s}?"),
                    None => format!("[iocost] takes: {}", KEYS.join(", ")),
                };
                cx.err(kloc, other, format!("unknown key '{other}'"), &hint);
            }
        }
    }
    if spec.devices.is_empty() && cx.errors.len() == before {
        cx.err(
            loc,
            "devices",
            "io.cost needs the disks to turn it on for".into(),
            "add devices = [\"/var/lib/postgresql\"] (the database's disk, or a path on it)",
        );
    }
    let q = spec.qos;
    if let (Some(lo), Some(hi)) = (q.min, q.max) {
        if lo > hi {
            cx.err(
                loc,
                "min",
                format!("min ({}%) is above max ({}%)", lo * 100.0, hi * 100.0),
                "min is the floor and max the ceiling of io.cost's rate",
            );
        }
    }
    let user = q != Qos::default();
    if user && q.rlat.is_none() {
        cx.err(
            loc,
            "rlat",
            "QoS targets need the read latency target".into(),
            "add rlat = \"5ms\" (the latency reads should keep to at the rpct percentile), or leave every QoS key out for the kernel's (ctrl=auto)",
        );
    }
    (cx.errors.len() == before).then_some(spec)
}

/// Resolve the section against the host facts: each device argument to its whole disk (the
/// same disk named twice is one), or an error at `devices`.
pub(crate) fn resolve(
    spec: &IocostSpec,
    source: &Source,
    host: &Host,
    errors: &mut Vec<Diagnostic>,
) -> Option<ResolvedIocost> {
    let before = errors.len();
    let mut devices: Vec<IocostDevice> = Vec::new();
    for (path, loc) in &spec.devices {
        match crate::devices::look_up(host, path) {
            Ok((dev, how)) => {
                if !devices.iter().any(|d| d.dev == dev) {
                    devices.push(IocostDevice {
                        dev,
                        path: path.clone(),
                        how,
                    });
                }
            }
            Err(m) => errors.push(
                Diagnostic::error(format!("devices = \"{path}\": {m}"))
                    .at(source.at(*loc))
                    .context("[iocost]")
                    .hint(crate::devices::HINT),
            ),
        }
    }
    if errors.len() > before {
        return None;
    }
    Some(ResolvedIocost {
        devices,
        qos: spec.qos.line(),
        model: spec.model.line(),
        spec_toml: spec_toml(spec),
    })
}

fn spec_toml(spec: &IocostSpec) -> Vec<String> {
    let mut out = Vec::new();
    let q = spec.qos;
    let d = |d: Duration| {
        let us = d.as_micros();
        if us >= 1000 && us.is_multiple_of(1000) {
            format!("\"{}ms\"", us / 1000)
        } else {
            format!("\"{us}us\"")
        }
    };
    let p = |f: f64| format!("\"{}%\"", f * 100.0);
    for (k, v) in [
        ("rpct", q.rpct.map(|v| v.to_string())),
        ("rlat", q.rlat.map(d)),
        ("wpct", q.wpct.map(|v| v.to_string())),
        ("wlat", q.wlat.map(d)),
        ("min", q.min.map(p)),
        ("max", q.max.map(p)),
    ] {
        if let Some(v) = v {
            out.push(format!("{k} = {v}"));
        }
    }
    match spec.model {
        Model::Keep => {}
        Model::Auto => out.push("model = \"auto\"".into()),
        Model::Linear(c) => out.push(format!("model = {}", c.toml())),
    }
    out
}

/// The resolved section as plan TOML with what it writes, for `plan show`.
pub fn show_toml(r: &ResolvedIocost) -> String {
    let mut out = String::from("\n[iocost]                        # io.cost on the cgroup2 root\n");
    let items: Vec<String> = r
        .devices
        .iter()
        .map(|d| format!("\"{}\"", d.path))
        .collect();
    let how: Vec<String> = r.devices.iter().map(|d| d.how.clone()).collect();
    let line = format!("devices = [{}]", items.join(", "));
    out.push_str(&format!("{line:<31} # {}\n", how.join("; ")));
    for l in &r.spec_toml {
        out.push_str(l);
        out.push('\n');
    }
    for d in &r.devices {
        out.push_str(&format!("# io.cost.qos   <- \"{} {}\"\n", d.dev, r.qos));
        if let Some(m) = &r.model {
            out.push_str(&format!("# io.cost.model <- \"{} {m}\"\n", d.dev));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Plan;

    fn spec(text: &str) -> Result<IocostSpec, String> {
        Plan::parse(text, Some(std::path::Path::new("p.toml")))
            .map(|p| p.iocost.expect("[iocost]"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn lines_as_the_kernel_prints_them() {
        let s = spec("[iocost]\ndevices = \"/\"\n").unwrap();
        assert_eq!(s.qos.line(), "enable=1 ctrl=auto");
        assert_eq!(s.model, Model::Keep);
        let s = spec("[iocost]\ndevices = [\"/\"]\nrlat = \"5ms\"\nwpct = 90\nmax = \"200%\"\nmodel = \"auto\"\n").unwrap();
        assert_eq!(
            s.qos.line(),
            "enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=90.00 wlat=5000 min=50.00 max=200.00"
        );
        assert_eq!(s.model.line().as_deref(), Some("ctrl=auto"));
        let s = spec("[iocost]\ndevices = [\"/\"]\nmodel = { rbps = 125000000, rseqiops = 30000, rrandiops = \"25K\", wbps = 100000000, wseqiops = 20000, wrandiops = 15_000 }\n").unwrap();
        assert_eq!(
            s.model.line().as_deref(),
            Some("ctrl=user model=linear rbps=125000000 rseqiops=30000 rrandiops=25000 wbps=100000000 wseqiops=20000 wrandiops=15000")
        );
    }

    #[test]
    fn bad_sections_name_the_key_and_line() {
        for (text, want) in [
            ("[iocost]\n", "io.cost needs the disks"),
            ("[iocost]\ndevices = [\"vda\"]\n", "not an absolute path"),
            ("[iocost]\ndevices = \"/\"\nrpct = 101\n", "percentile from 0 to 100"),
            ("[iocost]\ndevices = \"/\"\nrlat = \"0us\"\n", "outside 1us..10s"),
            ("[iocost]\ndevices = \"/\"\nwpct = 90\n", "need the read latency target"),
            ("[iocost]\ndevices = \"/\"\nrlat = \"5ms\"\nmin = \"90%\"\nmax = \"80%\"\n", "min (90%) is above max (80%)"),
            ("[iocost]\ndevices = \"/\"\nmodel = \"linear\"\n", "is not a model"),
            ("[iocost]\ndevices = \"/\"\nmodel = { rbps = 1 }\n", "lacks rseqiops"),
            ("[iocost]\ndevices = \"/\"\nmodel = { rbps = 0, rseqiops = 1, rrandiops = 1, wbps = 1, wseqiops = 1, wrandiops = 1 }\n", "positive whole number"),
            ("[iocost]\ndevices = \"/\"\nrlatency = \"5ms\"\n", "did you mean rlat?"),
        ] {
            let e = spec(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
            assert!(e.contains("p.toml:"), "{text}: {e}");
            assert!(e.contains("[iocost]"), "{text}: {e}");
        }
    }

    #[test]
    fn devices_resolve_to_disks_once() {
        let plan = Plan::parse(
            "[iocost]\ndevices = [\"/\", \"/tmp\"]\nrlat = \"2ms\"\n",
            Some(std::path::Path::new("p.toml")),
        )
        .unwrap();
        assert_eq!(plan.device_paths(), ["/", "/tmp"]);
        let host = Host::detect_for(plan.device_paths());
        let r = plan.resolve(&host).unwrap().iocost.unwrap();
        let disk = host.devices["/"].clone().unwrap().dev;
        assert_eq!(r.devices.len(), 1, "{r:?}");
        assert_eq!((r.devices[0].dev, r.devices[0].path.as_str()), (disk, "/"));
        assert!(r
            .qos
            .starts_with("enable=1 ctrl=user rpct=95.00 rlat=2000 "));
        assert_eq!(r.model, None);
        let shown = show_toml(&r);
        assert!(
            shown.contains(&format!("# io.cost.qos   <- \"{disk} enable=1 ctrl=user")),
            "{shown}"
        );

        let plan = Plan::parse(
            "[iocost]\ndevices = [\"/proc\"]\n",
            Some(std::path::Path::new("p.toml")),
        )
        .unwrap();
        let e = plan
            .resolve(&Host::detect_for(plan.device_paths()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml:2:1") && e.contains("[iocost]"), "{e}");
        assert!(e.contains("devices = \"/proc\": '/proc' is on"), "{e}");
    }
}
