//! A real backup beside a real database: `pg_dump -Z6` of the bench's own database in a loop
//! (`bench hog pgdump`), as a nightly backup job runs it. It connects as the `backup` role
//! (the bench's cluster has one, as docs/POSTGRESQL.md sets it up), so that its backend's
//! title names it and a `[place]` rule can move that backend. Its progress is in dumps: the
//! completed ones, and the one cut short counted by its size against the last whole dump.

use crate::hog::HogReport;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The role the dump connects as.
pub const ROLE: &str = "backup";

/// The SQL that gives the bench's cluster its backup role (read-only on every table).
pub const ROLE_SQL: &str = "CREATE ROLE backup LOGIN; GRANT pg_read_all_data TO backup";

fn dump_command(bin: &Path, port: u16, out: &Path) -> Command {
    let mut c = Command::new(bin.join("pg_dump"));
    c.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", ROLE])
        .args(["-Z", "6", "-f"])
        .arg(out)
        .arg("postgres")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// Dump in a loop until `duration` or SIGTERM; the dumps done (fractional) per minute.
pub fn run(bin: &Path, port: u16, out: &Path, duration: Duration) -> std::io::Result<HogReport> {
    let start = Instant::now();
    let mut done = 0u64;
    let mut whole = 0u64;
    let mut partial = 0.0;
    'dumps: while start.elapsed() < duration && !crate::stop::requested() {
        let mut child = dump_command(bin, port, out).spawn()?;
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if start.elapsed() >= duration || crate::stop::requested() {
                crate::child::stop(&mut child, libc::SIGTERM, Duration::from_secs(2));
                partial = match whole {
                    0 => 0.0,
                    w => (size(out) as f64 / w as f64).min(0.99),
                };
                break 'dumps;
            }
            // The hog's own pace: a look at its dump 20 times a second.
            std::thread::sleep(Duration::from_millis(50));
        };
        if !status.success() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(std::io::Error::other(format!(
                "pg_dump {status}: {}",
                err.trim()
            )));
        }
        done += 1;
        whole = size(out);
        println!("progress {done}");
    }
    let _ = std::fs::remove_file(out);
    let secs = start.elapsed().as_secs_f64();
    let work = done as f64 + partial;
    Ok(HogReport {
        kind: "pgdump".into(),
        work,
        unit: "dumps".into(),
        seconds: secs,
        rate: work / secs.max(1e-9) * 60.0,
    })
}
