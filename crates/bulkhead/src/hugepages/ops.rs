//! Huge page changes as plain data ([`HpOp`]): planned from a [`Resolved`] section (apply) or
//! from the saved record (reset), printed by `--dry-run`, executed with read-back.
//!
//! A pool write is read back, because the kernel gives what it can and says nothing: when it
//! gave fewer pages, bulkhead asks for memory compaction and tries once more; if the pool is
//! still short, every change of this run is undone and the error names the shortfall and the
//! kernel command line that reserves the pages at boot.

use super::state::{Saved, SavedMount};
use bulkhead_plan::hugepages::{MountTarget, Resolved};
use bulkhead_sys::cgroupfs::write_file;
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use bulkhead_sys::host::hugepages::{self as sysfs, Choice, Facts, Paths};
use bulkhead_sys::units::human_bytes;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum HpOp {
    /// Set a pool's `nr_hugepages` (system-wide or one node's) and read it back.
    Pool {
        file: PathBuf,
        size: u64,
        node: Option<u32>,
        pages: u64,
        /// What it holds now (and what undo writes back).
        was: u64,
        why: String,
    },
    /// Set a multiple-choice sysfs switch (THP enabled/defrag) and read it back.
    Switch {
        file: PathBuf,
        value: String,
        was: String,
        why: String,
    },
    /// Mount hugetlbfs, creating the missing directories first.
    Mount {
        path: PathBuf,
        options: String,
        mkdirs: Vec<PathBuf>,
        why: String,
    },
    /// Unmount a hugetlbfs bulkhead mounted and remove the directories it created.
    Umount {
        path: PathBuf,
        rmdirs: Vec<PathBuf>,
        why: String,
    },
}

impl fmt::Display for HpOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HpOp::Pool {
                file,
                size,
                pages,
                was,
                why,
                ..
            } => {
                write!(
                    f,
                    "write {} = \"{pages}\"  # {why}: {} (now {was})",
                    file.display(),
                    human_bytes(pages.saturating_mul(*size))
                )?;
                if pages > was {
                    f.write_str("; read back, compaction if short")?;
                }
                Ok(())
            }
            HpOp::Switch {
                file,
                value,
                was,
                why,
            } => write!(
                f,
                "write {} = \"{value}\"  # {why} (now {was})",
                file.display()
            ),
            HpOp::Mount {
                path,
                options,
                mkdirs,
                why,
            } => {
                for d in mkdirs {
                    writeln!(f, "mkdir {}", d.display())?;
                }
                write!(
                    f,
                    "mount -t hugetlbfs -o {options} hugetlbfs {}  # {why}",
                    path.display()
                )
            }
            HpOp::Umount { path, rmdirs, why } => {
                write!(f, "umount {}  # {why}", path.display())?;
                for d in rmdirs.iter().rev() {
                    write!(f, "\nrmdir {}", d.display())?;
                }
                Ok(())
            }
        }
    }
}

/// A mount point and its file system type, from mountinfo (the last entry for a path is the
/// one on top).
fn mount_at(path: &Path) -> Option<String> {
    bulkhead_sys::mountinfo::top_at(path).map(|m| m.fstype)
}

/// The directories to create for `path`, outermost first.
fn missing_dirs(path: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = path
        .ancestors()
        .take_while(|a| !a.exists())
        .map(Path::to_path_buf)
        .collect();
    v.reverse();
    v
}

/// What `apply` must do so the machine matches the section. Reads the system, changes nothing.
pub fn plan_apply(r: &Resolved, facts: &Facts, paths: &Paths) -> Result<Vec<HpOp>> {
    let mut errors = Vec::new();
    let mut ops = pool_ops(r, paths, &mut errors);
    ops.extend(thp_ops(r, paths));
    for m in &r.mounts {
        match mount_op(m, facts) {
            Ok(Some(op)) => ops.push(op),
            Ok(None) => {}
            Err(d) => errors.push(d),
        }
    }
    if errors.is_empty() {
        Ok(ops)
    } else {
        Err(Error::Invalid(errors))
    }
}

/// The pool writes: shrinking ones first, then growing ones with the largest pages first (a 1G
/// page needs 1G of contiguous memory, easiest to find before the smaller pools take theirs).
fn pool_ops(r: &Resolved, paths: &Paths, errors: &mut Vec<Diagnostic>) -> Vec<HpOp> {
    let mut shrink = Vec::new();
    let mut grow = Vec::new();
    for t in &r.pools {
        let file = paths.pool_file(t.size, t.node);
        let Some(was) = sysfs::pool_pages(paths, t.size, t.node) else {
            errors.push(
                Diagnostic::error(format!("{}: no such pool file", t.why))
                    .at(file.display().to_string()),
            );
            continue;
        };
        if was == t.pages {
            continue;
        }
        let op = HpOp::Pool {
            file,
            size: t.size,
            node: t.node,
            pages: t.pages,
            was,
            why: t.why.clone(),
        };
        if t.pages < was {
            shrink.push(op);
        } else {
            grow.push((t.size, op));
        }
    }
    grow.sort_by_key(|(size, _)| std::cmp::Reverse(*size));
    let mut ops = shrink;
    ops.extend(grow.into_iter().map(|(_, op)| op));
    ops
}

/// The transparent huge page switches that differ from the plan.
fn thp_ops(r: &Resolved, paths: &Paths) -> Vec<HpOp> {
    let mut ops = Vec::new();
    for t in &r.thp {
        let file = paths.thp_dir().join(&t.file);
        let was = Choice::read(&file).map(|c| c.active).unwrap_or_default();
        if was != t.value {
            ops.push(HpOp::Switch {
                file,
                value: t.value.clone(),
                was,
                why: format!("[hugepages] thp {} = \"{}\"", t.file, t.value),
            });
        }
    }
    ops
}

/// The mount a hugetlbfs of the plan needs: none when it is mounted as planned, an error when
/// something else is there.
fn mount_op(m: &MountTarget, facts: &Facts) -> std::result::Result<Option<HpOp>, Diagnostic> {
    let why = format!("[hugepages] mount {}", m.path.display());
    if let Some(existing) = facts.mounts.iter().rev().find(|x| x.path == m.path) {
        if mount_at(&m.path).as_deref() == Some("hugetlbfs") {
            if existing.pagesize == m.pagesize {
                return Ok(None);
            }
            return Err(Diagnostic::error(format!(
                "{} is already a hugetlbfs of {} pages, the plan wants {}",
                m.path.display(),
                human_bytes(existing.pagesize),
                human_bytes(m.pagesize)
            ))
            .context(why)
            .hint(format!(
                "unmount it first (umount {}) or pick another path",
                m.path.display()
            )));
        }
    }
    if let Some(fstype) = mount_at(&m.path) {
        return Err(Diagnostic::error(format!(
            "{} is already a mount point ({fstype})",
            m.path.display()
        ))
        .context(why)
        .hint("pick another path for the hugetlbfs"));
    }
    if m.path.exists() && !m.path.is_dir() {
        return Err(Diagnostic::error(format!(
            "{} exists and is not a directory",
            m.path.display()
        ))
        .context(why));
    }
    Ok(Some(HpOp::Mount {
        path: m.path.clone(),
        options: m.options.clone(),
        mkdirs: missing_dirs(&m.path),
        why,
    }))
}

/// A pool write read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PoolSet {
    pub asked: u64,
    pub got: u64,
    /// Compaction was asked for because the first write came up short.
    pub compacted: bool,
}

/// Set a pool to `pages` and read back what the kernel gave; when short, compact memory
/// (`/proc/sys/vm/compact_memory`) and try once more. Also used by `bench tlb`.
pub fn set_pool(paths: &Paths, size: u64, node: Option<u32>, pages: u64) -> Result<PoolSet> {
    let file = paths.pool_file(size, node);
    let write = |n: u64| {
        write_file(&file, &n.to_string()).map_err(|e| {
            Error::failed_with(
                Diagnostic::error(format!(
                    "cannot set the {} pool to {n} pages: {}",
                    human_bytes(size),
                    errno_text(&e)
                ))
                .at(file.display().to_string()),
            )
        })
    };
    let read = || sysfs::pool_pages(paths, size, node).unwrap_or(0);
    write(pages)?;
    let mut got = read();
    let mut compacted = false;
    if got < pages {
        compacted = true;
        let _ = write_file(&paths.compact_file(), "1");
        write(pages)?;
        got = read();
    }
    Ok(PoolSet {
        asked: pages,
        got,
        compacted,
    })
}

/// The kernel command line that reserves a pool at boot.
pub fn boot_hint(size: u64, node: Option<u32>, pages: u64) -> String {
    let count = match node {
        Some(n) => format!("{n}:{pages}"),
        None => pages.to_string(),
    };
    format!(
        "reserve them at boot, before memory fragments: add `hugepagesz={} hugepages={count}` to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot; /proc/cmdline shows the current one)",
        human_bytes(size)
    )
}

/// What an execution did, with the undo log to take it back.
#[derive(Debug)]
pub struct Applied {
    pub done: usize,
    /// Pools as read back, for the report.
    pub pools: Vec<(String, PoolSet)>,
    undo: Vec<HpOp>,
    saved_before: Saved,
    state: PathBuf,
    paths: Paths,
}

impl Applied {
    /// Take back every change (the slices failed after the pools were set, say).
    pub fn undo(self) -> Result<()> {
        let failed = undo_all(&self.undo, &self.paths);
        let _ = self.saved_before.save(&self.state);
        match failed.is_empty() {
            true => Ok(()),
            false => Err(Error::failed(format!(
                "undoing the huge page changes failed, check by hand: {}",
                failed.join("; ")
            ))),
        }
    }
}

fn undo_all(undo: &[HpOp], paths: &Paths) -> Vec<String> {
    let mut failed = Vec::new();
    for u in undo.iter().rev() {
        if let Err(e) = run_plain(u, paths) {
            failed.push(format!("{u}: {e}"));
        }
    }
    failed
}

/// Carry out one op without read-back checks (undo and reset paths).
fn run_plain(op: &HpOp, paths: &Paths) -> std::result::Result<(), String> {
    match op {
        HpOp::Pool {
            size, node, pages, ..
        } => {
            let r = set_pool(paths, *size, *node, *pages).map_err(|e| e.to_string())?;
            if r.got < *pages {
                return Err(format!("the kernel gave {} of {} pages", r.got, r.asked));
            }
            Ok(())
        }
        HpOp::Switch { file, value, .. } => {
            write_file(file, value).map_err(|e| format!("{}: {}", file.display(), errno_text(&e)))
        }
        HpOp::Mount {
            path,
            options,
            mkdirs,
            ..
        } => mount(path, options, mkdirs),
        HpOp::Umount { path, rmdirs, .. } => umount(path, rmdirs),
    }
}

fn mount(path: &Path, options: &str, mkdirs: &[PathBuf]) -> std::result::Result<(), String> {
    for d in mkdirs {
        fs::create_dir(d).map_err(|e| format!("mkdir {}: {}", d.display(), errno_text(&e)))?;
    }
    if let Err(e) = bulkhead_sys::host::hugepages::mount_hugetlbfs(path, options) {
        for d in mkdirs.iter().rev() {
            let _ = fs::remove_dir(d);
        }
        return Err(format!(
            "mount -t hugetlbfs -o {options} {}: {}",
            path.display(),
            errno_text(&e)
        ));
    }
    Ok(())
}

fn umount(path: &Path, rmdirs: &[PathBuf]) -> std::result::Result<(), String> {
    if mount_at(path).as_deref() == Some("hugetlbfs") {
        // By name, not following a symlink put in its place (UMOUNT_NOFOLLOW).
        bulkhead_sys::mountinfo::unmount(path, false).map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::ResourceBusy {
                " (files on it are still open or mapped: stop their users first)"
            } else {
                ""
            };
            format!("umount {}: {}{why}", path.display(), errno_text(&e))
        })?;
    }
    for d in rmdirs.iter().rev() {
        match fs::remove_dir(d) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("rmdir {}: {}", d.display(), errno_text(&e)))
            }
            _ => {}
        }
    }
    Ok(())
}

fn undo_of(op: &HpOp) -> HpOp {
    match op {
        HpOp::Pool {
            file,
            size,
            node,
            pages,
            was,
            why,
        } => HpOp::Pool {
            file: file.clone(),
            size: *size,
            node: *node,
            pages: *was,
            was: *pages,
            why: format!("undo {why}"),
        },
        HpOp::Switch {
            file,
            value,
            was,
            why,
        } => HpOp::Switch {
            file: file.clone(),
            value: was.clone(),
            was: value.clone(),
            why: format!("undo {why}"),
        },
        HpOp::Mount {
            path, mkdirs, why, ..
        } => HpOp::Umount {
            path: path.clone(),
            rmdirs: mkdirs.clone(),
            why: format!("undo {why}"),
        },
        HpOp::Umount { path, why, .. } => HpOp::Umount {
            path: path.clone(),
            rmdirs: vec![],
            why: why.clone(),
        },
    }
}

/// Carry out the planned changes, recording the original values in the state file first.
/// On any failure (a pool the kernel would not fill, a switch that did not take), every
/// change already made is undone and the record is put back as it was.
pub fn execute(ops: &[HpOp], paths: &Paths, state: &Path) -> Result<Applied> {
    let saved_before = Saved::load(state)?;
    let mut saved = saved_before.clone();
    let mut applied = Applied {
        done: 0,
        pools: vec![],
        undo: vec![],
        saved_before,
        state: state.to_path_buf(),
        paths: paths.clone(),
    };
    for op in ops {
        // Record first: a kill right after the write still leaves the original known.
        record(&mut saved, op, state)?;
        match applied.run(op) {
            Ok(()) => applied.done += 1,
            Err(e) => return Err(applied.roll_back(e)),
        }
    }
    Ok(applied)
}

/// Write what `op` is about to change into the record, when it is not there yet.
fn record(saved: &mut Saved, op: &HpOp, state: &Path) -> Result<()> {
    match op {
        HpOp::Pool { file, was, .. } => {
            if saved.remember(file, &was.to_string()) {
                saved.save(state)?;
            }
        }
        HpOp::Switch { file, was, .. } => {
            if saved.remember(file, was) {
                saved.save(state)?;
            }
        }
        HpOp::Mount { path, mkdirs, .. } => {
            saved.mounts.push(SavedMount {
                path: path.clone(),
                created: mkdirs.clone(),
            });
            saved.save(state)?;
        }
        HpOp::Umount { .. } => {}
    }
    Ok(())
}

impl Applied {
    /// Carry out one op with its read-back check; a change made is in the undo log even when
    /// its check fails.
    fn run(&mut self, op: &HpOp) -> Result<()> {
        match op {
            HpOp::Pool {
                size,
                node,
                pages,
                why,
                file,
                ..
            } => {
                let r = set_pool(&self.paths, *size, *node, *pages)?;
                self.undo.push(undo_of(op));
                self.pools.push((why.clone(), r));
                match r.got < *pages {
                    true => Err(pool_short(file, *size, *node, why, r)),
                    false => Ok(()),
                }
            }
            HpOp::Switch {
                file, value, why, ..
            } => {
                write_file(file, value).map_err(|e| {
                    Error::failed_with(
                        Diagnostic::error(format!("{why}: {}", errno_text(&e)))
                            .at(file.display().to_string()),
                    )
                })?;
                self.undo.push(undo_of(op));
                let now = Choice::read(file).map(|c| c.active).unwrap_or_default();
                match &now == value {
                    true => Ok(()),
                    false => Err(Error::failed_with(
                        Diagnostic::error(format!("{why}: the kernel reads back '{now}'"))
                            .at(file.display().to_string()),
                    )),
                }
            }
            HpOp::Mount {
                path,
                options,
                mkdirs,
                why,
            } => {
                mount(path, options, mkdirs)
                    .map_err(|e| Error::failed_with(Diagnostic::error(e).context(why.clone())))?;
                self.undo.push(undo_of(op));
                Ok(())
            }
            HpOp::Umount { .. } => run_plain(op, &self.paths).map_err(Error::failed),
        }
    }

    /// After a failed op: undo every change made, put the record back, and say so in the
    /// failure's hint.
    fn roll_back(self, e: Error) -> Error {
        let failed = undo_all(&self.undo, &self.paths);
        let _ = self.saved_before.save(&self.state);
        let mut d = e.diagnostics().remove(0);
        let undone = if failed.is_empty() {
            format!(
                "nothing was left changed: the {} huge page change(s) made were undone",
                self.undo.len()
            )
        } else {
            format!(
                "undoing the earlier changes failed too, check by hand: {}",
                failed.join("; ")
            )
        };
        d.hint = Some(match d.hint {
            Some(h) => format!("{h}\n  {undone}"),
            None => undone,
        });
        Error::failed_with(d)
    }
}

/// A pool the kernel filled only in part.
fn pool_short(file: &Path, size: u64, node: Option<u32>, why: &str, r: PoolSet) -> Error {
    let mut hint = boot_hint(size, node, r.asked);
    if size <= 2 << 20 {
        hint.push_str("; or free memory first (page cache: sync; echo 3 > /proc/sys/vm/drop_caches) and apply again");
    }
    Error::failed_with(
        Diagnostic::error(format!(
            "{why}: the kernel gave only {} of {} {} pages{}",
            r.got,
            r.asked,
            human_bytes(size),
            if r.compacted {
                ", also after compacting memory"
            } else {
                ""
            }
        ))
        .at(file.display().to_string())
        .hint(hint),
    )
}

/// What `reset` must do to put back what the record holds.
pub fn plan_reset(saved: &Saved, paths: &Paths) -> Vec<HpOp> {
    let mut ops = Vec::new();
    for m in &saved.mounts {
        ops.push(HpOp::Umount {
            path: m.path.clone(),
            rmdirs: m.created.clone(),
            why: "mounted by bulkhead".into(),
        });
    }
    let mut shrink = Vec::new();
    let mut grow = Vec::new();
    for (file, value) in &saved.files {
        let why = "the value before bulkhead changed it".to_string();
        let pool = file.file_name().is_some_and(|n| n == "nr_hugepages");
        if pool {
            let size = file
                .parent()
                .and_then(|d| d.file_name())
                .and_then(|n| sysfs::size_of_dir_name(&n.to_string_lossy()));
            let node = file.components().find_map(|c| {
                c.as_os_str()
                    .to_str()?
                    .strip_prefix("node")?
                    .parse::<u32>()
                    .ok()
            });
            let (Some(size), Ok(pages)) = (size, value.trim().parse::<u64>()) else {
                continue;
            };
            let was = sysfs::pool_pages(paths, size, node).unwrap_or(0);
            if was == pages {
                continue;
            }
            let op = HpOp::Pool {
                file: file.clone(),
                size,
                node,
                pages,
                was,
                why,
            };
            if pages < was {
                shrink.push(op);
            } else {
                grow.push(op);
            }
        } else {
            let was = Choice::read(file).map(|c| c.active).unwrap_or_default();
            if &was != value {
                ops.push(HpOp::Switch {
                    file: file.clone(),
                    value: value.clone(),
                    was,
                    why,
                });
            }
        }
    }
    ops.extend(shrink);
    ops.extend(grow);
    ops
}

/// What `reset` did.
#[derive(Debug, Default, serde::Serialize)]
pub struct ResetOutcome {
    pub done: usize,
    /// Pages still in use after a pool was shrunk (they become surplus and are freed as
    /// their users let go).
    pub notes: Vec<String>,
}

/// Put back what the record holds. Every op is tried; what could not be put back stays in
/// the record (and in the error), the rest is forgotten.
pub fn reset(ops: &[HpOp], paths: &Paths, state: &Path) -> Result<ResetOutcome> {
    let mut saved = Saved::load(state)?;
    let mut out = ResetOutcome::default();
    let mut failed = Vec::new();
    for op in ops {
        match run_plain(op, paths) {
            Ok(()) => {
                out.done += 1;
                match op {
                    HpOp::Umount { path, .. } => saved.mounts.retain(|m| &m.path != path),
                    HpOp::Pool {
                        file, size, node, ..
                    } => {
                        saved.files.remove(file);
                        let surplus = fs::read_to_string(
                            paths.pool_dir(*size, *node).join("surplus_hugepages"),
                        )
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .unwrap_or(0);
                        if surplus > 0 {
                            out.notes.push(format!(
                                "{} {} page(s) are still in use; they are surplus now and go back to the system when their users free them",
                                surplus,
                                human_bytes(*size)
                            ));
                        }
                    }
                    HpOp::Switch { file, .. } => {
                        saved.files.remove(file);
                    }
                    HpOp::Mount { .. } => {}
                }
            }
            Err(e) => failed.push(format!("{op}: {e}")),
        }
    }
    // Entries that already held their original value are forgotten too.
    saved.files.retain(|file, value| {
        ops.iter().any(|o| match o {
            HpOp::Pool { file: f, .. } | HpOp::Switch { file: f, .. } => f == file,
            _ => false,
        }) || !already_original(file, value)
    });
    saved.save(state)?;
    if failed.is_empty() {
        Ok(out)
    } else {
        Err(Error::failed_with(
            Diagnostic::error(format!(
                "could not put back: {}",
                failed.join("; ")
            ))
            .at(state.display().to_string())
            .hint("what could not be put back stays recorded; fix the cause and run `bulkhead hugepages reset` again"),
        ))
    }
}

fn already_original(file: &Path, value: &str) -> bool {
    if file.file_name().is_some_and(|n| n == "nr_hugepages") {
        fs::read_to_string(file).is_ok_and(|c| c.trim() == value.trim())
    } else {
        Choice::read(file).is_some_and(|c| c.active == value)
    }
}
