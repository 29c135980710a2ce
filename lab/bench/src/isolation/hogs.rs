//! Starting the hogs of a scenario and reading what they did. Hogs are killed when dropped,
//! so no error path leaves one running.

use super::{HogKind, BURST};
use crate::hog::HogReport;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Which hog, how long, where its files go.
pub struct HogSpec<'a> {
    pub kind: HogKind,
    pub bursty: bool,
    pub seconds: f64,
    pub data_dir: &'a Path,
    /// The other file system (the backup's target for `backup-other`).
    pub other_dir: Option<&'a Path>,
    /// The backup's archive size.
    pub archive_bytes: u64,
    /// The memory hog grows to twice this.
    pub host_memory: u64,
    /// The pgdump hog's PostgreSQL: its bin directory and port.
    pub pg: Option<(&'a Path, u16)>,
}

pub struct Hogs {
    kind: HogKind,
    children: Vec<Child>,
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for h in &mut self.children {
            crate::child::stop(h, libc::SIGTERM, Duration::from_secs(1));
        }
    }
}

pub fn exit_text(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (_, Some(9)) => "killed by SIGKILL (the kernel's OOM killer)".into(),
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), _) => format!("exited with status {c}"),
        _ => "ended".into(),
    }
}

fn commands(exe: &Path, h: &HogSpec) -> Result<Vec<Command>, String> {
    let secs = format!("{:.1}", h.seconds);
    Ok(match h.kind {
        HogKind::Cpu => (0..bulkhead_testkit::host::cpu_count())
            .map(|cpu| {
                let mut c = Command::new(exe);
                c.args(["hog", "cpu", "--pin", &cpu.to_string(), "--seconds", &secs]);
                if h.bursty {
                    c.args([
                        "--burst",
                        &BURST.0.to_string(),
                        "--pause",
                        &BURST.1.to_string(),
                    ]);
                }
                c
            })
            .collect(),
        HogKind::Io => {
            let mut c = Command::new(exe);
            c.args(["hog", "io", "--size", "512M", "--seconds", &secs, "--dir"])
                .arg(h.data_dir);
            vec![c]
        }
        HogKind::Reader => {
            let mut c = Command::new(exe);
            c.args(["hog", "reader", "--seconds", &secs, "--dir"])
                .arg(h.data_dir)
                .arg("--cold")
                .arg(h.data_dir.join("cold"));
            vec![c]
        }
        HogKind::Backup | HogKind::BackupOther => {
            let to = match (h.kind, h.other_dir) {
                (HogKind::BackupOther, Some(o)) => o.join("backup"),
                _ => h.data_dir.join("backup"),
            };
            let mut c = Command::new(exe);
            c.args(["hog", "backup", "--seconds", &secs])
                .args(["--size", &h.archive_bytes.to_string()])
                .arg("--from")
                .arg(h.data_dir)
                .arg("--to")
                .arg(to);
            vec![c]
        }
        HogKind::Memory => {
            let mut c = Command::new(exe);
            let max = (h.host_memory * 2).to_string();
            c.args([
                "hog",
                "memory",
                "--max",
                &max,
                "--step",
                "67108864",
                "--seconds",
                &secs,
                "--dir",
            ])
            .arg(h.data_dir);
            vec![c]
        }
        HogKind::PgDump => {
            let (bin, port) = h.pg.ok_or("the pgdump hog needs the bench's PostgreSQL")?;
            let mut c = Command::new(exe);
            c.args(["hog", "pgdump", "--seconds", &secs])
                .args(["--port", &port.to_string()])
                .arg("--bin")
                .arg(bin)
                .arg("--out")
                .arg(h.data_dir.join("dump.sql.gz"));
            vec![c]
        }
    })
}

impl Hogs {
    /// Start them in the cgroups whose `cgroup.procs` files are given.
    pub fn start(exe: &Path, h: &HogSpec, procs: &[PathBuf]) -> Result<Hogs, String> {
        let mut hogs = Hogs {
            kind: h.kind,
            children: Vec::new(),
        };
        for mut c in commands(exe, h)? {
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            let child = bulkhead_testkit::groups::spawn_joined(&mut c, procs)
                .map_err(|e| format!("cannot start the {} hog: {e}", h.kind.name()))?;
            hogs.children.push(child);
        }
        Ok(hogs)
    }

    /// Stop them; (summed work, what happened to one that did not end by itself).
    pub fn finish(mut self) -> (f64, Option<String>) {
        let mut reports = Vec::new();
        let mut fate = None;
        for mut h in std::mem::take(&mut self.children) {
            let st = crate::child::stop(&mut h, libc::SIGTERM, Duration::from_secs(3));
            let mut text = String::new();
            if let Some(mut o) = h.stdout.take() {
                let _ = o.read_to_string(&mut text);
            }
            match text
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<HogReport>(l).ok())
            {
                Some(r) => reports.push(r),
                None => {
                    // It died: its last progress line says how far it got.
                    let got = text
                        .lines()
                        .rev()
                        .find_map(|l| {
                            l.strip_prefix("progress ")
                                .and_then(|v| v.trim().parse::<f64>().ok())
                        })
                        .unwrap_or(0.0);
                    reports.push(HogReport {
                        kind: self.kind.name().into(),
                        work: got,
                        ..Default::default()
                    });
                    fate = Some(st.map_or("died".into(), exit_text));
                }
            }
        }
        (work(&reports), fate)
    }
}

/// The hogs' summed work rate, or for memory hogs the MiB they held.
pub fn work(h: &[HogReport]) -> f64 {
    if h.first().is_some_and(|h| h.kind == "memory") {
        h.iter().map(|h| h.work).sum()
    } else {
        h.iter().map(|h| h.rate).sum()
    }
}

/// The unit of [`work`].
pub fn unit(kind: HogKind) -> &'static str {
    match kind {
        HogKind::Cpu => "M iterations/s",
        HogKind::Io | HogKind::Reader => "MiB/s",
        HogKind::Backup | HogKind::BackupOther => "MiB/s written",
        HogKind::Memory => "MiB held",
        HogKind::PgDump => "dumps/min",
    }
}
