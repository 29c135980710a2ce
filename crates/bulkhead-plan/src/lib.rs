//! The plan: a TOML file of slices with systemd's resource directives, sockets to activate,
//! and huge pages. A pure model: it parses, checks and resolves against host facts, and
//! builds no cgroup, sandbox or process.
//!
//! Data flows one way: [`Plan::load`] parses and type-checks the file (host-independent),
//! [`Plan::resolve`] turns percentages and device paths into the numbers of one host, and the
//! cgroup backends turn a [`ResolvedPlan`] into file writes.

#![forbid(unsafe_code)]

pub mod check;
pub mod convert;
mod devices;
mod directives;
pub mod env;
pub mod guard;
pub mod hugepages;
pub mod import;
pub mod iocost;
mod name;
mod parse;
pub mod place;
mod resolve;
pub mod sandbox;
pub mod services;
pub mod socket;
pub mod toml_text;
mod values;

pub use directives::{directive_names, nearest, CpuWeight, MemSpec, MemValue, TasksSpec, Value};
pub use name::SliceName;
pub use resolve::{CpuMax, IoMax, ResolvedPlan, ResolvedSlice, Setting};
pub use socket::SocketSpec;

use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use bulkhead_sys::paths::DEFAULT_PLAN_PATH;

/// The plan used when no file exists at the default path: the seeds' database layout.
pub const EMBEDDED_DEFAULT: &str = include_str!("default.toml");

/// A line and column in the plan file (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Loc {
    pub line: usize,
    pub col: usize,
}

/// A value with the place it came from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct At<T> {
    pub value: T,
    pub loc: Loc,
    /// The text as written, for messages and `plan show`.
    pub raw: String,
}

/// The text of a plan and where it came from.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file, or `None` for the embedded default.
    pub path: Option<PathBuf>,
    pub text: String,
}

impl Source {
    pub fn label(&self) -> String {
        match &self.path {
            Some(p) => p.display().to_string(),
            None => "<embedded default plan>".into(),
        }
    }
    pub fn loc(&self, offset: usize) -> Loc {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before
            .rfind('\n')
            .map_or(before.len(), |i| before.len() - i - 1)
            + 1;
        Loc { line, col }
    }
    pub fn at(&self, loc: Loc) -> String {
        format!("{}:{}:{}", self.label(), loc.line, loc.col)
    }
}

/// One slice as written in the plan.
#[derive(Debug, Clone)]
pub struct SliceSpec {
    pub name: SliceName,
    /// Where `[slice.NAME]` stands; `None` for a parent the plan did not name.
    pub loc: Option<Loc>,
    pub description: Option<String>,
    /// Canonical directive name -> value.
    pub directives: BTreeMap<&'static str, At<Value>>,
    /// `services = [...]`: systemd services the plan puts in this slice (`Slice=` drop-ins).
    pub services: Vec<At<services::Service>>,
}

impl SliceSpec {
    pub fn implicit(&self) -> bool {
        self.loc.is_none()
    }
}

/// A parsed, type-checked plan (not yet resolved against a host).
#[derive(Debug, Clone)]
pub struct Plan {
    pub source: Source,
    pub slices: BTreeMap<SliceName, SliceSpec>,
    /// `[socket.NAME]` sections, by name.
    pub sockets: BTreeMap<String, SocketSpec>,
    /// `[place.NAME]` placement rules, by name (at most [`place::MAX_RULES`]).
    pub place: BTreeMap<String, place::PlaceRule>,
    /// The `[hugepages]` section (pools, THP, hugetlbfs mounts), if the plan has one.
    pub hugepages: Option<hugepages::HugepagesSpec>,
    /// The `[guard]` section (the slice `bulkhead guard` protects and its sideloads), if any.
    pub guard: Option<guard::GuardSpec>,
    /// The `[iocost]` section (io.cost on the database's disks), if any.
    pub iocost: Option<iocost::IocostSpec>,
    /// The `[check]` section (findings the operator accepts for this host), if any.
    pub check: Option<check::CheckSpec>,
    /// Warnings and notes found while reading (legacy directives, implicit parents).
    pub notes: Vec<Diagnostic>,
}

impl Plan {
    /// Parse plan text. `path` is only used in messages.
    pub fn parse(text: &str, path: Option<&Path>) -> Result<Plan> {
        parse::parse(Source {
            path: path.map(Path::to_path_buf),
            text: text.to_string(),
        })
    }

    /// Load the plan `-c` names. With no `-c`, the default path is used when it exists and
    /// the embedded default plan otherwise.
    pub fn load(path: Option<&Path>) -> Result<Plan> {
        match path {
            Some(p) => {
                let text = read_plan_file(p)?;
                Plan::parse(&text, Some(p))
            }
            None => {
                let p = Path::new(DEFAULT_PLAN_PATH);
                if p.exists() {
                    let text = read_plan_file(p)?;
                    Plan::parse(&text, Some(p))
                } else {
                    Plan::parse(EMBEDDED_DEFAULT, None)
                }
            }
        }
    }

    /// Resolve against `host`, whose `devices` must hold every path [`Plan::device_paths`]
    /// names (`Host::detect_for(plan.device_paths())` looks them up on this machine).
    pub fn resolve(&self, host: &bulkhead_sys::host::Host) -> Result<ResolvedPlan> {
        resolve::resolve(self, host)
    }

    /// Every device argument the plan names (`IODevice*`, `IO*BandwidthMax`, `IO*IOPSMax`,
    /// `[iocost]` devices): the host facts to look up before [`Plan::resolve`].
    pub fn device_paths(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in self.slices.values() {
            for at in s.directives.values() {
                match &at.value {
                    Value::DeviceWeights(l) => out.extend(l.iter().map(|(d, _)| d.as_str())),
                    Value::DeviceLimits(l) => out.extend(l.iter().map(|(d, _)| d.as_str())),
                    Value::DeviceLatency(l) => out.extend(l.iter().map(|(d, _)| d.as_str())),
                    _ => {}
                }
            }
        }
        if let Some(c) = &self.iocost {
            out.extend(c.devices.iter().map(|(d, _)| d.as_str()));
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The plan file `-c` names must be readable, also for a command that does not read the
/// plan (`status`, `move`): one error and exit code for a missing plan everywhere.
pub fn check_plan_file(path: Option<&Path>) -> Result<()> {
    path.map_or(Ok(()), |p| read_plan_file(p).map(drop))
}

fn read_plan_file(p: &Path) -> Result<String> {
    match std::fs::read_to_string(p) {
        Ok(t) => Ok(t),
        Err(e) => {
            let d = Diagnostic::error(format!(
                "cannot read the plan file: {}",
                bulkhead_sys::error::errno_text(&e)
            ))
            .at(p.display().to_string());
            let hint = match e.kind() {
                std::io::ErrorKind::NotFound => format!(
                    "create it (`bulkhead plan show > {}` starts from the default plan), or leave out -c to use {DEFAULT_PLAN_PATH}",
                    p.display()
                ),
                std::io::ErrorKind::PermissionDenied => {
                    "run as root, or make the file readable".to_string()
                }
                _ => "check that -c names a readable TOML file".to_string(),
            };
            Err(Error::invalid(d.hint(hint)))
        }
    }
}

#[cfg(test)]
mod tests;
