//! Placing processes on cgroupfs: the caller itself (`run`: join, then exec) or a running
//! process with all its threads (`move`), in every hierarchy the slice exists in; and the one
//! directory a child can be cloned into where the slice is a single cgroup2 directory.

use super::mark;
use super::CgroupFs;
use crate::backend::{Joiner, PlaceError, Placement};
use crate::layout::{Hierarchy, Version};
use bulkhead_plan::SliceName;
use bulkhead_sys::cgroupfs::write_file;
use bulkhead_sys::error::{errno_text, Diagnostic, Error};
use std::fs;
use std::path::PathBuf;

impl Placement for CgroupFs {
    fn name(&self) -> &'static str {
        "cgroupfs"
    }

    fn slices(&self) -> Vec<SliceName> {
        self.slices_on_system()
    }

    fn slice_exists(&self, slice: &SliceName) -> bool {
        self.all_hierarchies().into_iter().any(|h| {
            let d = self.dir(h, slice);
            d.is_dir() && mark::may_be_ours(&d)
        })
    }

    fn unverified(&self) -> Option<String> {
        mark::unverified()
    }

    fn join(&self, slice: &SliceName, _who: &Joiner) -> Result<(), PlaceError> {
        let dirs = self.existing_dirs(slice);
        if dirs.is_empty() {
            return Err(PlaceError::MissingSlice(slice.clone()));
        }
        for (h, d) in dirs {
            write_file(&d.join("cgroup.procs"), "0").map_err(|e| {
                let mut diag = Diagnostic::error(format!(
                    "cannot join slice '{slice}' in the {} hierarchy: {}",
                    h.label(),
                    errno_text(&e)
                ))
                .at(d.display().to_string());
                if e.raw_os_error() == Some(libc::EBUSY) && h.version == Version::V2 {
                    diag = diag.hint(
                        "on cgroup v2 processes can only join leaf slices (ones without child slices)",
                    );
                }
                PlaceError::Failed(Error::failed_with(diag))
            })?;
        }
        Ok(())
    }

    /// The slice's directory if it exists in exactly one hierarchy and that one is cgroup2
    /// (pure v2; on hybrid and v1 hosts the slice has v1 directories too).
    /// Directories are counted before the one left is checked for bulkhead's mark: on hybrid
    /// and v1 hosts this says no without the mark checks that `join` then does once.
    fn cgroup2_dir(&self, slice: &SliceName) -> Option<PathBuf> {
        let mut present = self
            .all_hierarchies()
            .into_iter()
            .map(|h| (h, self.dir(h, slice)))
            .filter(|(_, d)| d.is_dir());
        let (h, d) = present.next()?;
        let alone = present.next().is_none();
        (alone && h.version == Version::V2 && mark::is_ours(&d)).then_some(d)
    }

    fn move_pid(&self, slice: &SliceName, pid: i32) -> Result<(), String> {
        let dirs = self.existing_dirs(slice);
        if dirs.is_empty() {
            return Err(format!("slice '{slice}' does not exist"));
        }
        move_into(&dirs, pid)
    }

    /// [`crate::Placement::move_held`] on cgroupfs: when the PID names another process after
    /// the move, that process goes where its parent is (where it was born).
    fn move_held(
        &self,
        slice: &SliceName,
        pid: i32,
        still_same: &dyn Fn() -> bool,
    ) -> Result<(), String> {
        let dirs = self.existing_dirs(slice);
        if dirs.is_empty() {
            return Err(format!("slice '{slice}' does not exist"));
        }
        move_into(&dirs, pid)?;
        if still_same() {
            return Ok(());
        }
        let parent = bulkhead_sys::process::parent(pid as u32)
            .and_then(|pp| fs::read_to_string(format!("/proc/{pp}/cgroup")).ok());
        let hs: Vec<&Hierarchy> = dirs.iter().map(|(h, _)| *h).collect();
        match parent {
            Some(text) => {
                put_back(&hs, &text, pid);
                Err(format!(
                    "the process exited during the move and PID {pid} names another process now: that one was put back where its parent is"
                ))
            }
            None => Err(format!(
                "the process exited during the move; PID {pid} names no process now"
            )),
        }
    }

    /// `move --slice /`: back to the cgroup root (out of every slice, as before `run` or
    /// `move`), in every hierarchy.
    fn move_pid_out(&self, pid: i32) -> Result<(), String> {
        let dirs: Vec<(&Hierarchy, PathBuf)> = self
            .all_hierarchies()
            .into_iter()
            .map(|h| (h, h.mount.join(&self.root)))
            .collect();
        move_into(&dirs, pid)
    }
}

/// Write `pid` into each directory's cgroup.procs; on a failure, put it back where it was.
fn move_into(dirs: &[(&Hierarchy, PathBuf)], pid: i32) -> Result<(), String> {
    match bulkhead_sys::process::is_kernel_thread(pid) {
        None => return Err("no such process".into()),
        Some(true) => return Err("is a kernel thread; kernel threads cannot be moved".into()),
        Some(false) => {}
    }
    let original = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mut moved: Vec<&Hierarchy> = Vec::new();
    for (h, d) in dirs {
        if let Err(e) = write_file(&d.join("cgroup.procs"), &pid.to_string()) {
            put_back(&moved, &original, pid);
            return Err(refusal(h, &e));
        }
        moved.push(h);
    }
    Ok(())
}

/// Put a process back where it was in the hierarchies already changed.
fn put_back(moved: &[&Hierarchy], original: &str, pid: i32) {
    for mh in moved {
        if let Some(orig) = original_path(original, mh) {
            let procs = mh
                .mount
                .join(orig.trim_start_matches('/'))
                .join("cgroup.procs");
            let _ = write_file(&procs, &pid.to_string());
        }
    }
}

fn refusal(h: &Hierarchy, e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ESRCH) => "no such process".to_string(),
        Some(libc::EBUSY) if h.version == Version::V2 => format!(
            "{}: on cgroup v2 processes can only join leaf slices",
            errno_text(e)
        ),
        Some(libc::EINVAL) => format!(
            "the {} hierarchy refused it ({}): real-time or kernel tasks cannot move",
            h.label(),
            errno_text(e)
        ),
        _ => format!("the {} hierarchy refused it: {}", h.label(), errno_text(e)),
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
