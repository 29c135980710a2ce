//! `export systemd`.

use crate::args::{Cli, ExportCmd};
use crate::cmd::{json, report};
use bulkhead::actions::export;
use bulkhead::error::Result;

pub fn export(cli: &Cli, e: &ExportCmd) -> Result<i32> {
    let ExportCmd::Systemd(a) = e;
    let version = export::version(a.systemd_version)?;
    let files = export::unit_files(&cli.context(), version, a.memory.clone())?;
    if a.json && a.dry_run {
        println!("{}", json(&files));
        return Ok(0);
    }
    if a.dry_run {
        for f in &files.files {
            println!("# {}", a.dir.join(&f.path).display());
            println!("{}", f.text);
        }
        if !cli.quiet {
            report(&files.notes);
        }
        return Ok(0);
    }
    let w = export::write(&a.dir, &files)?;
    if a.json {
        println!(
            "{}",
            json(&serde_json::json!({
                "systemd_version": version,
                "written": w.written,
                "unchanged": w.unchanged,
                "removed": w.removed,
                "notes": files.notes,
            }))
        );
        return Ok(0);
    }
    if !cli.quiet {
        report(&files.notes);
        for p in &w.written {
            println!("wrote {}", p.display());
        }
        for p in &w.removed {
            println!("removed {} (not needed for this host)", p.display());
        }
        println!(
            "{} file(s) for systemd {version}: {} written, {} unchanged",
            files.files.len(),
            w.written.len(),
            w.unchanged.len()
        );
    }
    Ok(0)
}
