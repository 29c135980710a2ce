//! A booted system in a slice (issue 29) on a host whose PID 1 is systemd: `spawn --boot
//! --slice` of an overlay of the host's own root, so the container's PID 1 is the same
//! systemd, as `systemd-nspawn --boot` in a slice runs it. On pure cgroup v2 bulkhead splits
//! its delegated scope (its own `supervisor` cgroup beside the container's, as nspawn does):
//! the scope's controllers reach the container's systemd. The stop is a SIGTERM to bulkhead
//! (exit 0), and neither the scope nor the container's cgroups are left.
//!
//! The container boots `basic.target` with `vmhost.service` masked: systemd in a container
//! reads its own arguments, not the kernel's, so the guest's `systemd.wants=vmhost.service`
//! does not reach it, and the mask says so twice.

use super::host::Host;
use crate::boot::{stop, text, wait_ready, Booted};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// An overlay of `/` (its changes on a tmpfs) mounted in a directory of its own, so that the
/// sandbox root is not the host's root; unmounted on drop, before anything removes a file.
struct OverlayRoot {
    dir: PathBuf,
}

impl OverlayRoot {
    fn new() -> OverlayRoot {
        use nix::mount::{mount, MsFlags};
        let dir = PathBuf::from(format!("/run/bulkhead-hosts-boot-{}", std::process::id()));
        let (changes, merged) = (dir.join("changes"), dir.join("root"));
        std::fs::create_dir_all(&changes).unwrap();
        std::fs::create_dir_all(&merged).unwrap();
        mount(
            Some("tmpfs"),
            &changes,
            Some("tmpfs"),
            MsFlags::empty(),
            Some("size=256M,mode=0755"),
        )
        .expect("mount a tmpfs for the overlay's changes");
        let root = OverlayRoot { dir };
        std::fs::create_dir_all(changes.join("upper")).unwrap();
        std::fs::create_dir_all(changes.join("work")).unwrap();
        let opts = format!(
            "lowerdir=/,upperdir={0}/upper,workdir={0}/work",
            changes.display()
        );
        mount(
            Some("overlay"),
            &merged,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .expect("mount an overlay of /");
        root
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
}

impl Drop for OverlayRoot {
    fn drop(&mut self) {
        use nix::mount::{umount2, MntFlags};
        for m in ["root", "changes"] {
            let p = self.dir.join(m);
            let _ = umount2(&p, MntFlags::MNT_DETACH);
            // Only empty directories: nothing of the host's root is ever removed through here.
            let _ = std::fs::remove_dir(&p);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn has_word(file: &Path, word: &str) -> bool {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .split_whitespace()
        .any(|w| w == word)
}

#[test]
fn a_booted_system_in_a_slice_gets_its_controllers() {
    let _s = super::serial();
    let Some(h) = Host::new() else { return };
    let check = "spawn --boot --slice";
    if !h.systemd {
        h.report(
            check,
            "not checked: PID 1 is not systemd (boot:: covers cgroupfs)",
        );
        return;
    }
    h.apply(&[("boot", "TasksMax = 400")]);
    let overlay = OverlayRoot::new();
    let log = h.tmp().join("boot.log");
    let f = File::create(&log).unwrap();
    let mut b = Booted(
        h.cmd()
            .args(["spawn", "--boot", "--writable", "--timeout", "600s"])
            .args(["--slice", &h.slice("boot"), "-D"])
            .arg(overlay.root())
            .args([
                "--",
                "systemd.unit=basic.target",
                "systemd.mask=vmhost.service",
            ])
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("run bulkhead"),
    );
    let pid = b.0.id();
    let t0 = Instant::now();
    wait_ready(&mut b, t0 + Duration::from_secs(300), &log);
    let up = t0.elapsed();
    let mut seen = format!("ready after {} ms", up.as_millis());
    // Where systemd keeps its cgroups: the unified mount (pure v2, hybrid), else name=systemd.
    let slice = h.unified_dir("boot").unwrap_or_else(|| {
        let named = Path::new("/sys/fs/cgroup/systemd");
        named.join(
            h.dir("pids", "boot")
                .unwrap()
                .strip_prefix("/sys/fs/cgroup/pids")
                .unwrap(),
        )
    });
    let scope = slice.join(format!("bulkhead-spawn-{pid}.scope"));
    // The container's own cgroup: `payload` below bulkhead's `bulkhead-boot-PID` (which holds
    // the limits on how deep and how many cgroups the container makes).
    let container = scope.join(format!("bulkhead-boot-{pid}/payload"));
    if h.v2("memory") {
        let sub = std::fs::read_to_string(scope.join("cgroup.subtree_control")).unwrap_or_default();
        seen += &format!("; scope subtree_control [{}]", sub.trim());
        for c in ["memory", "pids"] {
            assert!(
                has_word(&container.join("cgroup.controllers"), c),
                "{c} not delegated to {} (the scope's subtree_control: {sub:?}):\n{}",
                container.display(),
                text(&log)
            );
        }
        assert!(
            has_word(&scope.join("supervisor/cgroup.procs"), &pid.to_string()),
            "bulkhead ({pid}) is not in {}/supervisor",
            scope.display()
        );
    }
    // The container's systemd runs in the cgroup bulkhead made for it, and manages it.
    assert!(
        container.join("init.scope").is_dir(),
        "no init.scope in {}:\n{}",
        container.display(),
        text(&log)
    );
    let t1 = Instant::now();
    let code = stop(&mut b, &log);
    seen += &format!(
        "; SIGTERM: exit {code} after {} ms",
        t1.elapsed().as_millis()
    );
    // systemd removes the emptied scope on its own; wait for it.
    let t2 = Instant::now();
    while scope.exists() && t2.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    seen += &format!("; scope left: {}", scope.exists());
    h.report(check, &seen);
    assert_eq!(code, 0, "{}", text(&log));
    assert!(
        !scope.exists(),
        "{} is left after the stop",
        scope.display()
    );
}
