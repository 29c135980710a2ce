//! Test support: a small root file system made by the tests themselves from Debian's
//! busybox-static (`/bin/busybox` and one symlink per applet), a few milliseconds to build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The static busybox, or why it cannot be used (a dynamic busybox would need the host's
/// libraries inside the root).
pub fn static_busybox() -> Result<PathBuf, String> {
    let p = PathBuf::from("/bin/busybox");
    if !p.exists() {
        return Err("/bin/busybox is missing (apt install busybox-static)".into());
    }
    let out = Command::new("ldd").arg(&p).output();
    match out {
        Ok(o) if String::from_utf8_lossy(&o.stdout).contains("=>") => {
            Err("/bin/busybox is dynamically linked (apt install busybox-static)".into())
        }
        _ => Ok(p),
    }
}

/// Build a busybox root under `dir` (created): /bin/busybox, a symlink per applet in /bin,
/// /etc/passwd and /etc/group with root and nobody, and empty mount points.
pub fn busybox_root(dir: &Path) -> PathBuf {
    let bb = static_busybox().unwrap_or_else(|e| panic!("{e}"));
    for d in [
        "bin", "etc", "proc", "sys", "dev", "tmp", "root", "var/tmp", "home/app",
    ] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::copy(&bb, dir.join("bin/busybox")).unwrap();
    let list = Command::new(&bb).arg("--list").output().unwrap();
    for name in String::from_utf8_lossy(&list.stdout).lines() {
        let name = name.trim();
        if name.is_empty() || name == "busybox" {
            continue;
        }
        let _ = std::os::unix::fs::symlink("busybox", dir.join("bin").join(name));
    }
    std::os::unix::fs::symlink("bin", dir.join("sbin")).unwrap();
    std::fs::create_dir_all(dir.join("usr")).unwrap();
    std::os::unix::fs::symlink("../bin", dir.join("usr/bin")).unwrap();
    bulkhead_testkit::write(dir.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n");
    bulkhead_testkit::write(
        dir.join("etc/group"),
        "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n",
    );
    std::fs::write(dir.join("etc/hostname"), "busybox\n").unwrap();
    dir.to_path_buf()
}
