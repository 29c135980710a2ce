//! One io.cost write as data, and carrying a list of them out: recorded first, read back,
//! undone in reverse when one fails.

use super::record::Record;
use super::{holds, line_of, QOS};
use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use bulkhead_sys::host::DevNum;
use std::fmt;
use std::path::{Path, PathBuf};

/// Write one disk's line of an io.cost root file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IocostOp {
    pub file: PathBuf,
    pub dev: DevNum,
    /// What follows `MAJ:MIN ` in the write.
    pub value: String,
    /// The disk's line before (None: the kernel did not list it).
    pub was: Option<String>,
    pub why: String,
}

impl fmt::Display for IocostOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "write {} = \"{} {}\"  # {} (now: {})",
            self.file.display(),
            self.dev,
            self.value,
            self.why,
            self.was.as_deref().map_or(
                "io.cost never set up on this disk".to_string(),
                |w| format!("\"{w}\"")
            )
        )
    }
}

fn is_qos(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n == QOS)
}

/// The line that puts a disk back as it was: the kernel's own settings (`ctrl=auto`) are
/// asked for by name, a user's are written back as they read.
pub fn restore_value(file: &Path, was: Option<&str>) -> String {
    let auto = was.is_none_or(|w| w.split_whitespace().any(|t| t == "ctrl=auto"));
    if !auto {
        return was.unwrap_or_default().to_string();
    }
    if is_qos(file) {
        let enable = was
            .and_then(|w| w.split_whitespace().find(|t| t.starts_with("enable=")))
            .unwrap_or("enable=0");
        format!("{enable} ctrl=auto")
    } else {
        "ctrl=auto".into()
    }
}

fn undo_of(op: &IocostOp) -> IocostOp {
    IocostOp {
        file: op.file.clone(),
        dev: op.dev,
        value: restore_value(&op.file, op.was.as_deref()),
        was: Some(op.value.clone()),
        why: format!("undo {}", op.why),
    }
}

/// One write(2) of a line, as `echo LINE > FILE` does it (O_TRUNC, which cgroupfs ignores;
/// a test's plain file then holds the line alone).
fn write_line(file: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(file)?;
    f.write_all(line.as_bytes())
}

/// Write one line and read it back.
fn run(op: &IocostOp) -> std::result::Result<(), String> {
    run_op(op).map_err(|(_, e)| e)
}

/// [`run`], saying whether the kernel took the write (true: the read-back differed).
fn run_op(op: &IocostOp) -> std::result::Result<(), (bool, String)> {
    let line = format!("{} {}", op.dev, op.value);
    write_line(&op.file, &line).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                " (io.cost takes only whole disks with a multi-queue request queue: not partitions, nor bio-based device-mapper devices)"
            }
            _ => "",
        };
        (
            false,
            format!("{}: \"{line}\": {}{why}", op.file.display(), errno_text(&e)),
        )
    })?;
    let now = std::fs::read_to_string(&op.file)
        .ok()
        .and_then(|c| line_of(&c, op.dev));
    if holds(now.as_deref(), &op.value) {
        Ok(())
    } else {
        Err((
            true,
            format!(
                "{}: wrote \"{line}\", the kernel reads back \"{}\"",
                op.file.display(),
                now.unwrap_or_default()
            ),
        ))
    }
}

/// What an execution did, with the undo log to take it back.
#[derive(Debug)]
pub struct Applied {
    pub done: usize,
    undo: Vec<IocostOp>,
    before: Record,
    state: PathBuf,
}

impl Applied {
    /// Take back every change (the slices failed after io.cost was set, say).
    pub fn undo(self) -> Result<()> {
        let failed = undo_all(&self.undo);
        let _ = self.before.save(&self.state);
        if failed.is_empty() {
            Ok(())
        } else {
            Err(Error::failed(format!(
                "undoing the io.cost changes failed, check by hand: {}",
                failed.join("; ")
            )))
        }
    }
}

fn undo_all(undo: &[IocostOp]) -> Vec<String> {
    undo.iter()
        .rev()
        .filter_map(|u| run(u).err().map(|e| format!("{u}: {e}")))
        .collect()
}

/// Carry out the planned writes, recording each disk's line before its first change. On any
/// failure every write made is undone and the record put back as it was.
pub fn execute(ops: &[IocostOp], state: &Path) -> Result<Applied> {
    let before = Record::load(state)?;
    let mut rec = before.clone();
    let mut applied = Applied {
        done: 0,
        undo: vec![],
        before,
        state: state.to_path_buf(),
    };
    for op in ops {
        if rec.remember(&op.file, &op.dev.to_string(), op.was.as_deref()) {
            rec.save(state)?;
        }
        match run_op(op) {
            Ok(()) => {
                applied.undo.push(undo_of(op));
                applied.done += 1;
            }
            Err((took, e)) => {
                // A write the kernel took but reads back otherwise is put back too (a
                // refused one changed nothing: the kernel parses a line whole first).
                if took {
                    applied.undo.push(undo_of(op));
                }
                let failed = undo_all(&applied.undo);
                let _ = applied.before.save(state);
                let undone = if failed.is_empty() {
                    "nothing was left changed: io.cost is as it was before this apply".to_string()
                } else {
                    format!("undoing failed too, check by hand: {}", failed.join("; "))
                };
                return Err(Error::failed_with(
                    Diagnostic::error(format!("cannot set io.cost: {e}"))
                        .context(op.why.clone())
                        .hint(undone),
                ));
            }
        }
    }
    Ok(applied)
}

/// What `destroy` writes to put back what the record holds: QoS lines first (io.cost off),
/// then models. Reads the files, changes nothing.
pub fn plan_reset(rec: &Record) -> Vec<IocostOp> {
    let mut files: Vec<&PathBuf> = rec.files.keys().collect();
    files.sort_by_key(|f| !is_qos(f));
    let mut ops = Vec::new();
    for file in files {
        let content = std::fs::read_to_string(file).unwrap_or_default();
        for (dev, was) in &rec.files[file] {
            let Some(d) = parse_dev(dev) else { continue };
            let value = restore_value(file, was.as_deref());
            let now = line_of(&content, d);
            if holds(now.as_deref(), &value) {
                continue;
            }
            ops.push(IocostOp {
                file: file.clone(),
                dev: d,
                value,
                was: now,
                why: "[iocost] the line before bulkhead changed it".into(),
            });
        }
    }
    ops
}

fn parse_dev(s: &str) -> Option<DevNum> {
    let (a, b) = s.split_once(':')?;
    Some(DevNum {
        major: a.parse().ok()?,
        minor: b.parse().ok()?,
    })
}

/// Put back what the record holds. Every write is tried; what could not be put back stays
/// in the record (and in the error), the rest is forgotten.
pub fn reset(ops: &[IocostOp], state: &Path) -> Result<usize> {
    let mut rec = Record::load(state)?;
    let mut failed = Vec::new();
    let mut done = 0;
    for op in ops {
        match run(op) {
            Ok(()) => done += 1,
            Err(e) => failed.push(format!("{op}: {e}")),
        }
    }
    // Forget every disk whose line now holds its original.
    let entries: Vec<(PathBuf, String, Option<String>)> = rec
        .files
        .iter()
        .flat_map(|(f, m)| m.iter().map(|(d, w)| (f.clone(), d.clone(), w.clone())))
        .collect();
    for (file, dev, was) in entries {
        let content = std::fs::read_to_string(&file).unwrap_or_default();
        let now = parse_dev(&dev).and_then(|d| line_of(&content, d));
        if holds(now.as_deref(), &restore_value(&file, was.as_deref())) {
            rec.forget(&file, &dev);
        }
    }
    rec.save(state)?;
    if failed.is_empty() {
        Ok(done)
    } else {
        Err(Error::failed_with(
            Diagnostic::error(format!("could not put io.cost back: {}", failed.join("; ")))
                .at(state.display().to_string())
                .hint("what could not be put back stays recorded; fix the cause and run `bulkhead destroy` again"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_values() {
        let q = Path::new("/sys/fs/cgroup/io.cost.qos");
        let m = Path::new("/sys/fs/cgroup/io.cost.model");
        assert_eq!(restore_value(q, None), "enable=0 ctrl=auto");
        assert_eq!(
            restore_value(q, Some("enable=1 ctrl=auto rpct=0.00 rlat=25000")),
            "enable=1 ctrl=auto"
        );
        let user =
            "enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=50.00 max=150.00";
        assert_eq!(restore_value(q, Some(user)), user);
        assert_eq!(restore_value(m, None), "ctrl=auto");
        assert_eq!(
            restore_value(m, Some("ctrl=auto model=linear rbps=1")),
            "ctrl=auto"
        );
        let lin =
            "ctrl=user model=linear rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6";
        assert_eq!(restore_value(m, Some(lin)), lin);
    }
}
