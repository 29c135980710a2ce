//! Escape test, issue 40 #6: `iocost calibrate PATH` opened PATH by name and followed other
//! users' symlinks. With `--destroy-data` a symlink of nobody's to a disk got that disk
//! overwritten; without it, the scratch file went into whatever directory the symlink named
//! (root's 0700 directory). Now PATH is opened once by the host-path rule and used through
//! that descriptor: a symlink another user owns is refused, and the scratch file is an
//! unnamed O_TMPFILE in the directory the descriptor holds.

use super::sandbox::{LoopDev, Scratch};
use crate::common::{stderr, stdout};
use bulkhead_testkit::assert_has;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// What `LoopDev` writes first on its disk.
const MARK: &[u8] = b"HOSTDISK-SECRET\n";

fn say(what: &str, result: &str) {
    println!("escape[calibrate]: tried {what} -> {result}");
}

fn calibrate(path: &Path, extra: &[&str]) -> Output {
    bulkhead_testkit::bins::bulkhead_cmd()
        .args(["iocost", "calibrate"])
        .arg(path)
        .args(["--seconds", "0.5", "--size", "64M", "--depth", "2"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("run bulkhead")
}

/// The device's first bytes, read past the page cache.
fn head(disk: &LoopDev) -> Vec<u8> {
    use std::io::Read;
    #[repr(align(4096))]
    struct Block([u8; 4096]);
    let mut b = Box::new(Block([0; 4096]));
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&disk.dev)
        .unwrap()
        .read_exact(&mut b.0)
        .unwrap();
    b.0[..MARK.len()].to_vec()
}

fn nobodys_symlink(dir: &Path, name: &str, to: &Path) -> std::path::PathBuf {
    let link = dir.join(name);
    std::os::unix::fs::symlink(to, &link).unwrap();
    bulkhead_testkit::ok(Command::new("chown").args(["-h", "65534:65534"]).arg(&link));
    link
}

#[test]
fn calibrate_follows_no_symlink_of_another_user() {
    let Some(_suite) = crate::suite::cgroups_alone() else {
        return;
    };
    let s = Scratch::new("calibrate");
    let attackers = s.dir.join("nobody");
    std::fs::create_dir_all(&attackers).unwrap();
    // nobody's own directory (not sticky: the kernel's protected_symlinks does not apply).
    std::fs::set_permissions(&attackers, std::fs::Permissions::from_mode(0o755)).unwrap();
    bulkhead_testkit::ok(Command::new("chown").args(["65534:65534"]).arg(&attackers));

    // 1. nobody's symlink to a disk, calibrated with --destroy-data.
    let disk = LoopDev::sized(&s.dir, 64 << 20);
    let link = nobodys_symlink(&attackers, "disk", Path::new(&disk.dev));
    let o = calibrate(&link, &["--destroy-data"]);
    let head = head(&disk);
    say(
        &format!(
            "calibrate --destroy-data through nobody's symlink to {}",
            disk.dev
        ),
        &format!("exit {:?}: {}", o.status.code(), stderr(&o).trim()),
    );
    assert_eq!(
        head, MARK,
        "the disk behind nobody's symlink was overwritten"
    );
    assert!(
        !o.status.success(),
        "calibrate went through nobody's symlink"
    );
    assert!(
        stderr(&o).contains("symlink"),
        "the refusal names the symlink: {}",
        stderr(&o)
    );

    // 2. nobody's symlink to a directory only root may enter.
    let secret = s.dir.join("root-only");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = nobodys_symlink(&attackers, "dir", &secret);
    let o = calibrate(&link, &[]);
    say(
        "calibrate through nobody's symlink to root's 0700 directory",
        &format!("exit {:?}: {}", o.status.code(), stderr(&o).trim()),
    );
    assert!(!o.status.success(), "calibrate worked in root's directory");

    // 3. Root's own directory, named without a foreign symlink: measured, nothing left there.
    let o = calibrate(&secret, &["--json"]);
    assert!(
        o.status.success(),
        "calibrate in root's directory: {}",
        stderr(&o)
    );
    assert_has(&stdout(&o), "rbps");
    let left: Vec<_> = std::fs::read_dir(&secret).unwrap().collect();
    assert!(left.is_empty(), "the scratch file stayed: {left:?}");
    say(
        "calibrate in root's own directory",
        "measured, nothing left behind",
    );
}
