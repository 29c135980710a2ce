//! Planning an apply: what each control file holds after the writes planned so far (read
//! from the system, or a fresh cgroup's default), so only the writes that change something
//! are planned, each with the value that undoes it.

use super::map::{fresh_default, keyed_lines, reset_line, same, same_line, Cmp, Reset, Want};
use super::mark;
use super::op::Op;
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::human_bytes;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Default)]
pub struct Planner {
    pub ops: Vec<Op>,
    pub errors: Vec<Diagnostic>,
    /// Files written by the planned ops, with what they hold then.
    sim: HashMap<PathBuf, String>,
    /// Cgroups the planned ops create.
    created: HashSet<PathBuf>,
}

impl Planner {
    /// Plan the creation of a cgroup.
    pub fn mkdir(&mut self, dir: &Path) {
        self.created.insert(dir.to_path_buf());
        self.ops.push(Op::Mkdir {
            dir: dir.to_path_buf(),
        });
    }

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

    /// Plan what it takes for `dir` to hold what `want` says.
    pub fn want(&mut self, dir: &Path, want: Want) {
        match want {
            Want::Value {
                file,
                value,
                why,
                cmp,
                optional,
                before,
            } => self.want_value(dir, &file, value, why, cmp, optional, before),
            Want::Lines {
                file,
                lines,
                why,
                reset,
            } => self.want_lines(dir, &file, &lines, &why, reset),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn want_value(
        &mut self,
        dir: &Path,
        file: &str,
        value: String,
        why: String,
        cmp: Cmp,
        optional: bool,
        before: Option<(String, String)>,
    ) {
        let cur = self.current(&dir.join(file));
        if cur.as_deref().is_some_and(|c| same(cmp, c, &value)) {
            return;
        }
        // A default for a file this kernel does not have.
        if optional && cur.is_none() {
            return;
        }
        if file == "memory.max" && self.below_use(dir, &value, &why) {
            return;
        }
        if let Some((bfile, bval)) = before {
            let bcur = self.current(&dir.join(&bfile));
            if bcur.is_some() && !bcur.as_deref().is_some_and(|c| same(Cmp::Number, c, &bval)) {
                self.write(dir, &bfile, bval, format!("room for {why}"), false);
            }
        }
        self.write(dir, file, value, why, optional);
    }

    /// cgroup v2 does not refuse a memory.max below current use: it OOM-kills until the
    /// group fits. Refuse that here instead (an error, and true).
    fn below_use(&mut self, dir: &Path, value: &str, why: &str) -> bool {
        if self.created.contains(dir) {
            return false;
        }
        let used = fs::read_to_string(dir.join("memory.current"))
            .ok()
            .and_then(|c| c.trim().parse::<u64>().ok());
        let (Some(used), Ok(new)) = (used, value.parse::<u64>()) else {
            return false;
        };
        if new >= used {
            return false;
        }
        self.errors.push(
            Diagnostic::error(format!(
                "{why} is below what the slice uses now ({}); cgroup v2 would OOM-kill processes to get there",
                human_bytes(used)
            ))
            .at(dir.display().to_string())
            .hint("raise the limit, or stop or move processes out of the slice first"),
        );
        true
    }

    fn want_lines(
        &mut self,
        dir: &Path,
        file: &str,
        lines: &[(String, String)],
        why: &str,
        reset: Reset,
    ) {
        let path = dir.join(file);
        let Some(content) = self.current(&path) else {
            // Let the write fail loudly: the plan asked for it.
            for (k, l) in lines {
                self.write(dir, file, format!("{k} {l}"), why.to_string(), false);
            }
            return;
        };
        let created = self.created.contains(dir);
        let mut cur: BTreeMap<String, String> = keyed_lines(&content).into_iter().collect();
        for (k, l) in lines {
            if same_line(reset, cur.get(k).map(String::as_str), l) {
                continue;
            }
            let restore = cur
                .get(k)
                .map(|c| format!("{k} {c}"))
                .unwrap_or_else(|| reset_line(reset, k));
            self.ops.push(Op::Write {
                file: path.clone(),
                value: format!("{k} {l}"),
                why: why.to_string(),
                restore: (!created).then_some(restore),
                optional: false,
            });
            cur.insert(k.clone(), l.clone());
        }
        self.clear_stale_lines(&path, &mut cur, lines, why, reset);
        let text: String = cur.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        self.sim.insert(path, text);
    }

    /// Device entries the plan no longer has go back to the reset value.
    fn clear_stale_lines(
        &mut self,
        path: &Path,
        cur: &mut BTreeMap<String, String>,
        lines: &[(String, String)],
        why: &str,
        reset: Reset,
    ) {
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
                file: path.to_path_buf(),
                value: reset_line(reset, &k),
                why: format!("{why} (removed from the plan)"),
                restore: Some(format!("{k} {old}")),
                optional: false,
            });
        }
    }

    /// Make sure `controller` is enabled for the children of every cgroup from the
    /// hierarchy's root down to `dir`.
    pub fn enable_down_to(&mut self, mount: &Path, dir: &Path, controller: &str) {
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
            let content = match self.sim.get(&f) {
                Some(c) => c.clone(),
                None if self.created.contains(&d) => String::new(),
                None => fs::read_to_string(&f).unwrap_or_default(),
            };
            if content.split_whitespace().any(|c| c == controller) {
                continue;
            }
            let foreign = !self.created.contains(&d) && !mark::is_ours(&d);
            self.sim.insert(f, format!("{content} {controller}"));
            self.ops.push(Op::Enable {
                dir: d,
                controller: controller.to_string(),
                foreign,
            });
        }
    }
}
