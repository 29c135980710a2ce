//! `[place.NAME]`: placement rules, cgrules' and systemd's habits in the plan's words. A rule
//! names the slice its processes go to and what they must match: the user, the executable,
//! the command line, the parent, the systemd unit (every key given must match; a list
//! matches when any of its patterns does). `bulkhead place` applies them to processes as
//! they start. Pure: matching takes the facts of one process ([`Facts`]).
//!
//! ```toml
//! [place.backup-backends]      # PostgreSQL backends serving the backup role
//! slice = "db-helper"
//! parent = "postgres"
//! cmdline = "postgres: *backup *"
//!
//! [place.helpers]
//! slice = "db-helper"
//! exe = ["pg_dump", "pg_dumpall", "restic", "rsync", "node_exporter"]
//! ```

pub mod glob;

use crate::values::Ctx;
use crate::{Loc, SliceName, Source};
use bulkhead_sys::error::Diagnostic;
use std::collections::BTreeMap;
use toml::de::DeValue;
use toml::Spanned;

/// At most this many rules in a plan.
pub const MAX_RULES: usize = 64;
/// At most this many patterns in one key of a rule.
pub const MAX_PATTERNS: usize = 32;
/// At most this many characters in one pattern.
pub const MAX_PATTERN_LEN: usize = 256;

/// The keys a rule matches on.
pub const MATCH_KEYS: &[&str] = &["user", "exe", "cmdline", "parent", "unit"];

/// One `[place.NAME]` section.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlaceRule {
    pub name: String,
    pub loc: Loc,
    /// Where matching processes go.
    pub slice: SliceName,
    /// User names or numeric UIDs (the real UID).
    pub user: Vec<String>,
    /// Patterns for the executable: with a `/`, its whole path; without, its file name or
    /// the command name (`comm`).
    pub exe: Vec<String>,
    /// Patterns for the command line, arguments joined by spaces (after a process rewrote
    /// it, as PostgreSQL's backends do: "postgres: 15/main: backup \[local\] idle").
    pub cmdline: Vec<String>,
    /// Patterns for the parent's executable, as `exe`.
    pub parent: Vec<String>,
    /// Patterns for the systemd unit the process runs in (`postgresql@*.service`).
    pub unit: Vec<String>,
}

/// A file by what the kernel vouches for: (device, inode).
pub type FileId = (u64, u64);

/// What a rule sees of one process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts<'a> {
    pub uid: u32,
    pub exe: Option<&'a str>,
    /// The executable's identity (fstat through /proc/PID/exe: the file itself, whatever
    /// path the process's mount namespace gives it).
    pub exe_id: Option<FileId>,
    pub comm: &'a str,
    pub cmdline: &'a str,
    pub parent_exe: Option<&'a str>,
    pub parent_exe_id: Option<FileId>,
    pub parent_comm: &'a str,
    pub unit: Option<&'a str>,
}

/// One `exe` or `parent` pattern as this host resolves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// A name or a glob: matched against the path's text or `comm` (which the process's
    /// owner can choose).
    Pattern,
    /// A literal absolute path: the file it names on the host, by identity.
    File(FileId),
    /// A literal absolute path with no file on the host: matches no process.
    Missing,
}

/// A rule's names resolved on the host: its users' UIDs, and its `exe` and `parent`
/// patterns (in order) as [`Program`]s.
#[derive(Debug, Clone, Default)]
pub struct OnHost {
    pub uids: Vec<u32>,
    pub exe: Vec<Program>,
    pub parent: Vec<Program>,
}

impl PlaceRule {
    /// Whether the process matches every key the rule gives. `uids` are the rule's users,
    /// resolved on this host (names the host does not know are left out by the caller);
    /// every path pattern is matched by its text ([`PlaceRule::matches_on`] matches literal
    /// paths by the file's identity).
    pub fn matches(&self, f: &Facts<'_>, uids: &[u32]) -> bool {
        self.matches_on(
            f,
            &OnHost {
                uids: uids.to_vec(),
                ..Default::default()
            },
        )
    }

    /// [`PlaceRule::matches`] with the rule resolved on the host: a literal executable path
    /// matches only the file it names (device and inode), not a process whose mount
    /// namespace shows another file at that path.
    pub fn matches_on(&self, f: &Facts<'_>, h: &OnHost) -> bool {
        let any = |pats: &[String], text: &str| pats.iter().any(|p| glob::matches(p, text));
        (self.user.is_empty() || h.uids.contains(&f.uid))
            && (self.exe.is_empty() || program(&self.exe, &h.exe, f.exe, f.exe_id, f.comm))
            && (self.cmdline.is_empty() || any(&self.cmdline, f.cmdline))
            && (self.parent.is_empty()
                || program(
                    &self.parent,
                    &h.parent,
                    f.parent_exe,
                    f.parent_exe_id,
                    f.parent_comm,
                ))
            && (self.unit.is_empty() || f.unit.is_some_and(|u| any(&self.unit, u)))
    }

    /// The `exe` and `parent` patterns that are literal absolute paths (no glob
    /// character): the ones [`OnHost`] resolves to files.
    pub fn literal_path(pattern: &str) -> bool {
        pattern.starts_with('/') && !pattern.contains(['*', '?', '['])
    }

    /// The match keys with their patterns, in [`MATCH_KEYS`] order (empty: not given).
    pub fn keys(&self) -> [(&'static str, &[String]); 5] {
        [
            ("user", &self.user),
            ("exe", &self.exe),
            ("cmdline", &self.cmdline),
            ("parent", &self.parent),
            ("unit", &self.unit),
        ]
    }
}

/// A program pattern: a literal path resolved on the host by the file's identity; else with
/// a `/` the whole executable path, else its file name or `comm`.
fn program(
    pats: &[String],
    on_host: &[Program],
    exe: Option<&str>,
    exe_id: Option<FileId>,
    comm: &str,
) -> bool {
    pats.iter().enumerate().any(|(i, p)| {
        match on_host.get(i) {
            Some(Program::File(id)) => return exe_id == Some(*id),
            Some(Program::Missing) => return false,
            _ => {}
        }
        if p.contains('/') {
            exe.is_some_and(|e| glob::matches(p, e))
        } else {
            let base = exe.map(|e| e.rsplit('/').next().unwrap_or(e));
            base.is_some_and(|b| glob::matches(p, b)) || glob::matches(p, comm)
        }
    })
}

/// Parse the `place` top-level table into `rules`.
pub(crate) fn parse(
    source: &Source,
    key_start: usize,
    value: &Spanned<DeValue<'_>>,
    rules: &mut BTreeMap<String, PlaceRule>,
    errors: &mut Vec<Diagnostic>,
) {
    let mut cx = Ctx {
        source,
        section: "[place]".into(),
        errors,
    };
    let Some(table) = value.get_ref().as_table() else {
        cx.err(
            source.loc(key_start),
            "",
            "'place' must be a table of rules".into(),
            "write [place.NAME] followed by slice = \"db-helper\" and what to match",
        );
        return;
    };
    for (name_key, body) in table.iter() {
        let loc = source.loc(name_key.span().start);
        let name = name_key.get_ref().to_string();
        if rules.len() == MAX_RULES {
            cx.err(
                loc,
                "",
                format!("more than {MAX_RULES} placement rules"),
                "merge rules that go to the same slice: a key takes a list of patterns",
            );
            return;
        }
        cx.section = format!("[place.{name}]");
        if let Some(r) = parse_rule(&mut cx, name.clone(), loc, body.get_ref()) {
            rules.insert(name, r);
        }
    }
}

fn parse_rule(cx: &mut Ctx<'_>, name: String, loc: Loc, body: &DeValue<'_>) -> Option<PlaceRule> {
    let Some(table) = body.as_table() else {
        cx.err(
            loc,
            "",
            "a placement rule must be a table".into(),
            &format!("write [place.{name}] on its own line, then slice = \"db-helper\" and what to match"),
        );
        return None;
    };
    let before = cx.errors.len();
    let mut slice = None;
    let mut keys: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (k, v) in table.iter() {
        let kloc = cx.source.loc(k.span().start);
        let key = k.get_ref().as_ref();
        if key == "slice" {
            slice = cx.string(kloc, key, v.get_ref()).and_then(|s| {
                SliceName::parse(&s)
                    .map_err(|m| cx.err(kloc, key, format!("invalid slice name: {m}"), ""))
                    .ok()
            });
        } else if let Some(&known) = MATCH_KEYS.iter().find(|&&m| m == key) {
            if let Some(p) = patterns(cx, kloc, key, v.get_ref()) {
                keys.insert(known, p);
            }
        } else {
            let all = ["slice", "user", "exe", "cmdline", "parent", "unit"];
            let hint = match crate::directives::suggest(key, &all) {
                Some(s) => format!("did you mean {s}?"),
                None => format!("a rule takes slice and {}", MATCH_KEYS.join(", ")),
            };
            cx.err(kloc, key, format!("unknown key '{key}'"), &hint);
        }
    }
    if keys.is_empty() && cx.errors.len() == before {
        cx.err(
            loc,
            "",
            "the rule matches nothing: it would place every process".into(),
            &format!(
                "add one of {} (e.g. exe = \"pg_dump\")",
                MATCH_KEYS.join(", ")
            ),
        );
    }
    if slice.is_none() && cx.errors.len() == before {
        cx.err(
            loc,
            "slice",
            "the rule needs the slice its processes go to".into(),
            "add slice = \"db-helper\"",
        );
    }
    if cx.errors.len() != before {
        return None;
    }
    let mut take = |k: &str| keys.remove(k).unwrap_or_default();
    Some(PlaceRule {
        name,
        loc,
        slice: slice?,
        user: take("user"),
        exe: take("exe"),
        cmdline: take("cmdline"),
        parent: take("parent"),
        unit: take("unit"),
    })
}

/// A string or a list of them, bounded in number and length.
fn patterns(cx: &mut Ctx<'_>, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<Vec<String>> {
    // A user may be a name or a UID: numbers are read as text.
    let uid = |v: &DeValue<'_>| match v {
        DeValue::Integer(i) if key == "user" => {
            Some(DeValue::String(i.as_str().to_string().into()))
        }
        _ => None,
    };
    let list = match v {
        DeValue::Array(a) => {
            let mut out = Vec::new();
            for i in a.iter() {
                let item = uid(i.get_ref());
                out.push(cx.string(loc, key, item.as_ref().unwrap_or(i.get_ref()))?);
            }
            out
        }
        other => {
            let item = uid(other);
            cx.strings(loc, key, item.as_ref().unwrap_or(other))?
        }
    };
    if list.is_empty() || list.len() > MAX_PATTERNS {
        cx.err(
            loc,
            key,
            format!("{key} must have 1 to {MAX_PATTERNS} patterns"),
            "write one pattern, or a list of them",
        );
        return None;
    }
    if let Some(p) = list
        .iter()
        .find(|p| p.is_empty() || p.chars().count() > MAX_PATTERN_LEN)
    {
        cx.err(
            loc,
            key,
            format!("pattern \"{p}\" must have 1 to {MAX_PATTERN_LEN} characters"),
            "use * for the parts that vary",
        );
        return None;
    }
    Some(list)
}

/// What makes a slice (or one of its parents) rank above a process's default place: a CPU
/// or I/O weight above the default 100, or memory protection. None: it does not.
fn raises(name: &SliceName, slices: &BTreeMap<SliceName, crate::SliceSpec>) -> Option<String> {
    use crate::directives::{CpuWeight, Value};
    let mut at = Some(name.clone());
    while let Some(n) = at {
        if let Some(spec) = slices.get(&n) {
            for (d, v) in &spec.directives {
                let above = match (&v.value, *d) {
                    (Value::CpuWeight(CpuWeight::Weight(w)), _) if *w > 100 => true,
                    (Value::Weight(w), "IOWeight") if *w > 100 => true,
                    (Value::Memory(_), "MemoryMin" | "MemoryLow") => true,
                    _ => false,
                };
                if above {
                    return Some(format!("{d} in [slice.{n}]"));
                }
            }
        }
        at = n.parent();
    }
    None
}

/// Every rule's slice must be one of the plan's; a rule into a slice that ranks above the
/// default must say whose processes it is for (`user`, or a systemd `unit`, which only root
/// or systemd can give a process): any user can start a program of a given name, path or
/// command line, and `place` runs as root (issue 40).
pub(crate) fn check_slices(
    source: &Source,
    rules: &BTreeMap<String, PlaceRule>,
    slices: &BTreeMap<SliceName, crate::SliceSpec>,
    errors: &mut Vec<Diagnostic>,
) {
    for r in rules
        .values()
        .filter(|r| r.user.is_empty() && r.unit.is_empty())
    {
        if let Some(why) = raises(&r.slice, slices) {
            errors.push(
                Diagnostic::error(format!(
                    "the rule sends processes into {}, which ranks above other processes ({why}), but says neither whose they are nor their unit: any user could start a matching process and have root raise it",
                    r.slice
                ))
                .at(source.at(r.loc))
                .context(format!("[place.{}]", r.name))
                .hint("add user = [\"postgres\"] (the users whose processes it is for), or unit = \"postgresql@*.service\""),
            );
        }
    }
    let named: Vec<String> = slices.keys().map(|n| n.to_string()).collect();
    for r in rules.values().filter(|r| !slices.contains_key(&r.slice)) {
        let hint = match crate::nearest(r.slice.as_str(), &named) {
            Some(s) => format!("did you mean '{s}'? Or add [slice.{}]", r.slice),
            None => format!("add [slice.{}] to the plan", r.slice),
        };
        errors.push(
            Diagnostic::error(format!("'{}' is not a slice of this plan", r.slice))
                .at(source.at(r.loc))
                .context(format!("[place.{}] slice", r.name))
                .hint(hint),
        );
    }
}

#[cfg(test)]
mod tests;

/// One placement the plan promises: what (a service, or a rule's processes), and the slice
/// it belongs in. For `bulkhead check`: where the database's processes should be.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Expected {
    /// `service` or `rule`.
    pub kind: &'static str,
    /// The service's unit name, or the rule's name.
    pub name: String,
    pub slice: SliceName,
    /// What a rule matches, as the plan writes it (`exe = pg_dump|restic, user = postgres`);
    /// empty for a service.
    pub matches: String,
}

/// The placements the plan promises: its services (`services = [...]` of each slice), then
/// its rules, in the plan's order of names.
pub fn expected(plan: &crate::Plan) -> Vec<Expected> {
    let services = crate::services::of_plan(plan)
        .into_iter()
        .map(|(name, slice)| Expected {
            kind: "service",
            name,
            slice,
            matches: String::new(),
        });
    let rules = plan.place.values().map(|r| {
        let matches = r
            .keys()
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k} = {}", v.join("|")))
            .collect::<Vec<_>>()
            .join(", ");
        Expected {
            kind: "rule",
            name: r.name.clone(),
            slice: r.slice.clone(),
            matches,
        }
    });
    services.chain(rules).collect()
}
