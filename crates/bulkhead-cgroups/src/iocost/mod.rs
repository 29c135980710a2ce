//! io.cost on the cgroup2 root: the plan's `[iocost]` section as writes to `io.cost.model`
//! and `io.cost.qos`, one line per disk. Plain data ([`IocostOp`], printed by `--dry-run`),
//! carried out with read-back, each previous line recorded before it is changed
//! ([`record`], in /run/bulkhead) so `destroy` can put it back, and undone as a whole when
//! any write fails: io.cost is never left half-applied.
//!
//! These files exist only at the root of a cgroup2 hierarchy that holds the io controller, on
//! a kernel with CONFIG_BLK_CGROUP_IOCOST: [`root`] says where, or why not (v1 and hybrid
//! hosts have the io controller on v1).

mod op;
pub mod record;

pub use op::{execute, plan_reset, reset, Applied, IocostOp};

use crate::layout::{Layout, Version};
use bulkhead_plan::iocost::ResolvedIocost;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use bulkhead_sys::host::DevNum;
use std::path::{Path, PathBuf};

pub const QOS: &str = "io.cost.qos";
pub const MODEL: &str = "io.cost.model";

/// The cgroup2 root that holds io.cost's files, or why this host has none.
pub fn root(layout: &Layout) -> std::result::Result<PathBuf, String> {
    let Some(h) = layout.hierarchy("io") else {
        return Err("this host has no I/O controller mounted".into());
    };
    if h.version == Version::V1 {
        return Err(format!(
            "the I/O controller is on cgroup v1 here ({}: {}), and io.cost is a cgroup v2 controller",
            match layout.kind {
                crate::layout::Kind::Hybrid => "a hybrid host",
                _ => "a v1 host",
            },
            h.mount.display()
        ));
    }
    if !h.mount.join(QOS).exists() {
        return Err(format!(
            "{} has no {QOS}: this kernel was built without io.cost (CONFIG_BLK_CGROUP_IOCOST)",
            h.mount.display()
        ));
    }
    Ok(h.mount.clone())
}

/// The root, or the refusal `apply` gives when the plan has an `[iocost]` section.
pub fn root_or_refuse(layout: &Layout) -> Result<PathBuf> {
    root(layout).map_err(|why| {
        Error::invalid(
            Diagnostic::error(format!("[iocost] cannot be applied on this host: {why}"))
                .hint("io.cost needs the io controller on cgroup v2 (systemd.unified_cgroup_hierarchy=1); on v1 and hybrid hosts use BFQ weights and IO*BandwidthMax instead, or remove [iocost] from the plan. Nothing was changed."),
        )
    })
}

/// `MAJ:MIN rest` lines of a root file: the rest for `dev`, if the kernel lists it.
pub fn line_of(content: &str, dev: DevNum) -> Option<String> {
    let key = dev.to_string();
    content.lines().find_map(|l| {
        let (k, rest) = l.trim().split_once(char::is_whitespace)?;
        (k == key).then(|| rest.trim().to_string())
    })
}

/// Whether a line the kernel printed holds every `key=value` of the wanted one.
pub fn holds(current: Option<&str>, wanted: &str) -> bool {
    let Some(cur) = current else { return false };
    let have: Vec<&str> = cur.split_whitespace().collect();
    wanted.split_whitespace().all(|t| have.contains(&t))
}

/// What `apply` writes so the disks hold the section: the model first (so io.cost starts with
/// it), then the QoS line that enables it. Reads the files, changes nothing.
pub fn plan_apply(r: &ResolvedIocost, root: &Path) -> Result<Vec<IocostOp>> {
    let read = |f: &str| {
        std::fs::read_to_string(root.join(f))
            .map_err(|e| bulkhead_sys::error::io_failed("cannot read", &root.join(f), e))
    };
    let (qos, model) = (read(QOS)?, read(MODEL)?);
    let mut ops = Vec::new();
    for (file, content, wanted) in [
        (MODEL, &model, r.model.as_deref()),
        (QOS, &qos, Some(r.qos.as_str())),
    ] {
        let Some(wanted) = wanted else { continue };
        for d in &r.devices {
            let was = line_of(content, d.dev);
            if holds(was.as_deref(), wanted) {
                continue;
            }
            ops.push(IocostOp {
                file: root.join(file),
                dev: d.dev,
                value: wanted.to_string(),
                was,
                why: format!("[iocost] {} ({})", d.path, d.dev),
            });
        }
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_comparisons() {
        let d = DevNum {
            major: 254,
            minor: 0,
        };
        let qos = "7:0 enable=0 ctrl=auto rpct=0.00\n254:0 enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=50.00 max=150.00\n";
        let l = line_of(qos, d);
        assert!(holds(
            l.as_deref(),
            "enable=1 ctrl=user rpct=95.00 rlat=5000"
        ));
        assert!(!holds(l.as_deref(), "enable=1 ctrl=auto"));
        assert!(!holds(None, "enable=1 ctrl=auto"));
        assert_eq!(line_of(qos, DevNum { major: 8, minor: 0 }), None);
    }

    /// A fake cgroup2 root whose files hold one line per write, as a kernel that lists one
    /// disk would.
    fn fake_root(tag: &str) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("bulkhead-iocost-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join(QOS), "254:0 enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 min=1.00 max=10000.00\n").unwrap();
        std::fs::write(root.join(MODEL), "254:0 ctrl=auto model=linear rbps=488636629 rseqiops=8932 rrandiops=8518 wbps=427891549 wseqiops=28755 wrandiops=21940\n").unwrap();
        root
    }

    fn resolved() -> ResolvedIocost {
        let dev = DevNum {
            major: 254,
            minor: 0,
        };
        ResolvedIocost {
            devices: vec![bulkhead_plan::iocost::IocostDevice {
                dev,
                path: "/var/lib/postgresql".into(),
                how: String::new(),
            }],
            qos: "enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=50.00 max=150.00".into(),
            model: Some("ctrl=user model=linear rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6".into()),
            spec_toml: vec![],
        }
    }

    #[test]
    fn apply_records_and_destroy_puts_back() {
        let root = fake_root("ok");
        let state = root.join("state.json");
        let r = resolved();
        let ops = plan_apply(&r, &root).unwrap();
        assert_eq!(ops.len(), 2, "{ops:#?}");
        assert!(
            ops[0].file.ends_with(MODEL) && ops[1].file.ends_with(QOS),
            "model first"
        );
        assert!(ops[1].to_string().starts_with(&format!(
            "write {}/io.cost.qos = \"254:0 enable=1 ctrl=user rpct=95.00",
            root.display()
        )));
        let a = execute(&ops, &state).unwrap();
        assert_eq!(a.done, 2);
        let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap();
        assert_eq!(read(QOS), format!("254:0 {}", r.qos));
        assert!(
            plan_apply(&r, &root).unwrap().is_empty(),
            "applied twice: nothing"
        );
        let rec = record::Record::load(&state).unwrap();
        assert_eq!(rec.files.len(), 2);

        let back = plan_reset(&rec);
        assert_eq!(back.len(), 2);
        assert!(back[0].file.ends_with(QOS), "io.cost off first");
        assert_eq!(back[0].value, "enable=0 ctrl=auto");
        assert_eq!(back[1].value, "ctrl=auto");
        assert_eq!(reset(&back, &state).unwrap(), 2);
        assert_eq!(read(QOS), "254:0 enable=0 ctrl=auto");
        assert!(
            !state.exists(),
            "the record is gone once everything is back"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_nothing_changed() {
        let root = fake_root("fail");
        let state = root.join("state.json");
        let ops = plan_apply(&resolved(), &root).unwrap();
        // The kernel refuses the QoS line (here: the file cannot be written).
        std::fs::remove_file(root.join(QOS)).unwrap();
        std::fs::create_dir(root.join(QOS)).unwrap();
        let e = execute(&ops, &state).unwrap_err().to_string();
        assert!(
            e.contains("cannot set io.cost") && e.contains("nothing was left changed"),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join(MODEL)).unwrap(),
            "254:0 ctrl=auto",
            "the model written before was put back"
        );
        assert!(!state.exists(), "the record is as it was (none)");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
