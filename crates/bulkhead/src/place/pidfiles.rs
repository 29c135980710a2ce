//! Services of the plan on a host without systemd: each scan reads the pidfile the plan names
//! and, when its process is not in the service's slice, says to move that process's tree.
//! A pidfile is trusted as far as its owner: it may name only a process of the user who owns
//! the file (root's may name any), so the postgres user cannot have root move sshd; its
//! directory must be writable by root or that owner alone; and the process must have started
//! before the file was written (else the PID was reused since: a stale pidfile, ignored).

use super::identity::in_slice;
use bulkhead_plan::services::Service;
use bulkhead_plan::SliceName;
use bulkhead_sys::procs;
use std::collections::HashSet;
use std::path::Path;

/// A service's main process to move with its tree, or why its pidfile was refused.
#[derive(Debug)]
pub(crate) struct ServiceMove {
    pub service: String,
    pub slice: SliceName,
    pub pid: i32,
    pub comm: String,
    pub cmdline: String,
    pub refused: Option<String>,
}

pub(crate) struct Pidfiles {
    services: Vec<(Service, SliceName)>,
    /// (service, pid) refusals already reported: each once.
    reported: HashSet<(String, i32)>,
}

impl Pidfiles {
    pub(crate) fn new(services: Vec<(Service, SliceName)>) -> Pidfiles {
        let services = services
            .into_iter()
            .filter(|(s, _)| s.pidfile.is_some())
            .collect();
        Pidfiles {
            services,
            reported: HashSet::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The services whose main process is outside their slice now. A missing pidfile is a
    /// stopped service: nothing to do, nothing to say.
    pub(crate) fn scan(&mut self) -> Vec<ServiceMove> {
        let mut out = Vec::new();
        for (svc, slice) in &self.services {
            let Some(path) = svc.pidfile.as_deref() else {
                continue;
            };
            let (pid, owner, written) = match procs::read_pidfile(Path::new(path)) {
                Ok(Some(p)) => (p.pid, p.owner, p.written),
                Ok(None) => continue,
                Err(e) => {
                    // Said once per service until the pidfile reads again.
                    if self.reported.insert((svc.name.clone(), 0)) {
                        out.push(ServiceMove {
                            service: svc.name.clone(),
                            slice: slice.clone(),
                            pid: 0,
                            comm: String::new(),
                            cmdline: String::new(),
                            refused: Some(format!(
                                "the pidfile {path} cannot be used ({e}): refused, nothing moved (make it a plain file of the service's user or root, on a path only they can change)"
                            )),
                        });
                    }
                    continue;
                }
            };
            self.reported.remove(&(svc.name.clone(), 0));
            let Some(p) = procs::read(pid) else {
                continue;
            };
            if in_slice(&p.cgroup, slice) {
                continue;
            }
            let refused = if owner != 0 && p.uid != owner {
                Some(format!(
                    "the pidfile {path} is owned by UID {owner} and names PID {pid} of UID {}: refused (a pidfile may name only its owner's processes)",
                    p.uid
                ))
            } else if started_after(p.start, written) {
                // The service wrote it before this process existed: a stale pidfile whose PID
                // was given to another process since (issue 40 #3).
                Some(format!(
                    "the pidfile {path} is stale: PID {pid} started after the file was written, so it is another process than the one the file was written for; ignored until the service writes it again"
                ))
            } else {
                None
            };
            if refused.is_some() && !self.reported.insert((svc.name.clone(), pid)) {
                continue;
            }
            out.push(ServiceMove {
                service: svc.name.clone(),
                slice: slice.clone(),
                pid,
                comm: p.comm,
                cmdline: p.cmdline,
                refused,
            });
        }
        out
    }
}

/// Whether a process (its start, clock ticks after boot) started after a file was written
/// (mtime, seconds since the epoch), with a second's slack for the clocks' rounding.
fn started_after(start_ticks: u64, written: i64) -> bool {
    let Some(boot) = bulkhead_sys::process::boot_time() else {
        return false;
    };
    let ticks = bulkhead_sys::process::clock_ticks().max(1);
    let started = boot as i64 + (start_ticks / ticks) as i64;
    started > written + 1
}
