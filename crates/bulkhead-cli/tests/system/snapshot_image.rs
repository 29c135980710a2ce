//! Snapshots and images on real file systems: btrfs, XFS with and without reflink and a tiny
//! ext4, each in a loop file under /var/tmp with a unique name, unmounted, detached and
//! removed by a guard even when the test fails. The sandbox registry and the image paths of
//! this process point at a directory of its own, so tests run in parallel and never touch the
//! machine's state.

use crate::common;
use bulkhead_testkit::assert_has;

use crate::common::rootfs::busybox_root;
use bulkhead::snapshot::{self, Choice, Method, Snapshot};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

static N: AtomicUsize = AtomicUsize::new(0);
static INIT: Once = Once::new();
/// clean_stale() removes every stale entry of the registry, so the tests that make stale
/// entries and check what it says run one at a time.
static CLEANING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `/var/tmp/bulkhead-snaptest-PID-N-TAG`
fn unique(tag: &str) -> PathBuf {
    let n = N.fetch_add(1, Ordering::SeqCst);
    PathBuf::from(format!(
        "/var/tmp/bulkhead-snaptest-{}-{n}-{tag}",
        std::process::id()
    ))
}

fn test_base() -> PathBuf {
    PathBuf::from(format!("/run/bulkhead-snaptest-{}", std::process::id()))
}

extern "C" fn remove_test_base() {
    let _ = std::fs::remove_dir_all(test_base());
}

/// The variables that move bulkhead's sandbox registry and image paths.
const STATE_ENV: [&str; 3] = [
    "BULKHEAD_STATE_DIR",
    "BULKHEAD_STORE_RECORD",
    "BULKHEAD_IMAGES_DIR",
];

/// Enter the suite as a snapshot test: beside the other snapshot tests only, while the
/// process's environment points the registry and the image paths (the library's, and every
/// bulkhead these tests start) at this process's own directory; the last one to leave puts
/// the environment back, before any test of another module runs.
fn suite() -> crate::suite::Guard {
    /// What the variables were before the snapshot tests (set outside, or not at all).
    static BEFORE: std::sync::OnceLock<Vec<Option<std::ffi::OsString>>> =
        std::sync::OnceLock::new();
    fn point() {
        BEFORE.get_or_init(|| STATE_ENV.iter().map(std::env::var_os).collect());
        let base = test_base();
        let to = [
            base.join("sandbox"),
            base.join("store.toml"),
            base.join("images"),
        ];
        for (var, path) in STATE_ENV.iter().zip(to) {
            std::env::set_var(var, path);
        }
    }
    fn restore() {
        for (var, was) in STATE_ENV.iter().zip(BEFORE.get().into_iter().flatten()) {
            match was {
                Some(v) => std::env::set_var(var, v),
                None => std::env::remove_var(var),
            }
        }
    }
    crate::suite::group("snapshot_image", point, restore)
}

/// Root, the tools, and this process's own registry and image paths.
fn setup() -> bool {
    if !common::prerequisites() {
        return false;
    }
    INIT.call_once(|| {
        // Runs at exit, after every test.
        bulkhead_sys::process::at_exit(remove_test_base).expect("atexit");
    });
    let mut missing: Vec<&str> = ["mkfs.btrfs", "mkfs.xfs", "mkfs.ext4", "btrfs", "losetup"]
        .into_iter()
        .filter(|t| !tool_exists(t))
        .collect();
    if common::rootfs::static_busybox().is_err() {
        missing.push("busybox-static");
    }
    if !std::fs::read_to_string("/proc/filesystems")
        .map(|t| t.contains("btrfs") && t.contains("xfs"))
        .unwrap_or(false)
    {
        // Not listed before the first mount loads the module: try one.
        let _ = Command::new("modprobe").args(["-q", "btrfs"]).status();
        let _ = Command::new("modprobe").args(["-q", "xfs"]).status();
    }
    if missing.is_empty() {
        return true;
    }
    let m = format!(
        "missing {} (apt install btrfs-progs xfsprogs e2fsprogs busybox-static)",
        missing.join(", ")
    );
    bulkhead_testkit::prereq::missing(&m)
}

fn tool_exists(t: &str) -> bool {
    bulkhead_testkit::prereq::in_system_dirs(t)
}

fn sh(cmd: &str, args: &[&str]) -> Output {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Loop devices whose backing file is `file`.
fn loops_of(file: &Path) -> Vec<String> {
    let o = Command::new("losetup")
        .arg("-j")
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split(':').next().map(String::from))
        .collect()
}

fn is_mounted(dir: &Path) -> bool {
    bulkhead_sys::mountinfo::read()
        .unwrap()
        .iter()
        .any(|m| m.point == dir)
}

/// Unmount (lazily if busy), detach, remove: the end of every loop file system here.
fn teardown(file: &Path, mnt: &Path) {
    for _ in 0..10 {
        if !is_mounted(mnt) {
            break;
        }
        if Command::new("umount")
            .arg(mnt)
            .status()
            .map(|s| !s.success())
            .unwrap_or(true)
        {
            let _ = Command::new("umount").arg("-l").arg(mnt).status();
        }
    }
    for _ in 0..100 {
        if loops_of(file).is_empty() {
            break;
        }
        for dev in loops_of(file) {
            let _ = Command::new("losetup").arg("-d").arg(&dev).status();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_dir(mnt);
}

/// A file system in a loop file, mounted at `mnt`.
struct LoopFs {
    file: PathBuf,
    mnt: PathBuf,
}

impl LoopFs {
    /// `kind`: btrfs, xfs (reflink=1), xfs-noreflink, ext4.
    fn new(kind: &str, mb: u64) -> LoopFs {
        let base = unique(kind);
        let fs = LoopFs {
            file: base.with_extension("img"),
            mnt: base.with_extension("mnt"),
        };
        std::fs::File::create(&fs.file)
            .unwrap()
            .set_len(mb << 20)
            .unwrap();
        let f = fs.file.to_str().unwrap();
        match kind {
            "btrfs" => sh("mkfs.btrfs", &["-q", "-f", f]),
            "xfs" => sh("mkfs.xfs", &["-q", "-f", "-m", "reflink=1", f]),
            "xfs-noreflink" => sh("mkfs.xfs", &["-q", "-f", "-m", "reflink=0", f]),
            "ext4" => sh("mkfs.ext4", &["-q", "-F", f]),
            other => panic!("unknown kind {other}"),
        };
        std::fs::create_dir(&fs.mnt).unwrap();
        sh("mount", &["-o", "loop", f, fs.mnt.to_str().unwrap()]);
        fs
    }

    /// Entries of the mount point whose names start with `.#bulkhead-`.
    fn snapshots(&self) -> Vec<String> {
        hidden_snapshots(&self.mnt)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        teardown(&self.file, &self.mnt);
    }
}

/// Snapshots beside the sources in `dir`: in the private `.bulkhead-snapshots` directory
/// (0700, root's), and pooled ones beside their image.
fn hidden_snapshots(dir: &Path) -> Vec<String> {
    let holder = dir.join(snapshot::SNAPSHOT_DIR);
    if let Ok(md) = std::fs::symlink_metadata(&holder) {
        assert!(md.is_dir() && md.uid() == 0, "{}", holder.display());
        assert_eq!(
            md.permissions().mode() & 0o777,
            0o700,
            "{}",
            holder.display()
        );
    }
    [dir, holder.as_path()]
        .into_iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".#bulkhead-"))
        .collect()
}

/// An image store made with the CLI, with its own record file; removed on drop.
struct Store {
    file: PathBuf,
    mnt: PathBuf,
    record: PathBuf,
    extra: Vec<PathBuf>,
}

impl Store {
    fn paths() -> Store {
        let base = unique("store");
        Store {
            file: base.with_extension("img"),
            mnt: base.with_extension("mnt"),
            record: base.with_extension("toml"),
            extra: Vec::new(),
        }
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(bulkhead_testkit::bins::this_build())
            .env("BULKHEAD_STORE_RECORD", &self.record)
            .args(args)
            .output()
            .expect("run bulkhead")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(
            o.status.success(),
            "bulkhead {args:?}: {}{}",
            common::stdout(&o),
            common::stderr(&o)
        );
        common::stdout(&o)
    }

    fn create(mb: u64) -> Store {
        let s = Store::paths();
        s.ok(&[
            "image",
            "store",
            "create",
            "--size",
            &format!("{mb}M"),
            "--mount",
            s.mnt.to_str().unwrap(),
            s.file.to_str().unwrap(),
        ]);
        s
    }

    /// A busybox root imported as the image `name`; returns its path.
    fn import_busybox(&mut self, name: &str) -> PathBuf {
        let src = unique("src");
        busybox_root(&src);
        self.ok(&["image", "import", src.to_str().unwrap(), name]);
        self.extra.push(src);
        self.mnt.join(name)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        teardown(&self.file, &self.mnt);
        let _ = std::fs::remove_file(&self.record);
        for e in &self.extra {
            let _ = std::fs::remove_dir_all(e);
            let _ = std::fs::remove_file(e);
        }
    }
}

/// A directory under /var/tmp (ext4 here), removed on drop.
struct TmpDir(PathBuf);

impl TmpDir {
    fn new(tag: &str) -> TmpDir {
        let d = unique(tag);
        std::fs::create_dir_all(&d).unwrap();
        TmpDir(d)
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Extra kinds of files in a busybox root: a hard link, a FIFO, a file owned by 1000:1000
/// with mode 4750 and an old mtime, a user xattr, and a nested directory.
fn decorate(root: &Path) {
    std::fs::hard_link(root.join("bin/busybox"), root.join("bin/busybox-link")).unwrap();
    sh("mkfifo", &[root.join("tmp/fifo").to_str().unwrap()]);
    let f = root.join("home/app/owned");
    std::fs::write(&f, "data").unwrap();
    std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4750)).unwrap();
    sh("touch", &["-d", "2001-02-03 04:05:06", f.to_str().unwrap()]);
    // A file system without user xattrs simply skips this.
    let _ = Command::new("setfattr")
        .args(["-n", "user.bulkhead", "-v", "yes"])
        .arg(&f)
        .status();
    std::fs::create_dir_all(root.join("var/lib/deep/er")).unwrap();
    std::fs::write(root.join("var/lib/deep/er/file"), vec![7u8; 300_000]).unwrap();
}

/// The copy has what `decorate` made, with the same metadata.
fn check_copy(src: &Path, copy: &Path) {
    let m = |p: &Path| std::fs::symlink_metadata(p).unwrap();
    let a = m(&src.join("home/app/owned"));
    let b = m(&copy.join("home/app/owned"));
    assert_eq!((b.uid(), b.gid()), (1000, 1000));
    assert_eq!(b.mode(), a.mode());
    assert_eq!(b.mtime(), a.mtime());
    let l1 = m(&copy.join("bin/busybox"));
    let l2 = m(&copy.join("bin/busybox-link"));
    assert_eq!(l1.ino(), l2.ino(), "hard link kept");
    assert!(m(&copy.join("tmp/fifo")).file_type().is_fifo_like());
    assert_eq!(
        std::fs::read_link(copy.join("bin/sh")).unwrap(),
        PathBuf::from("busybox")
    );
    assert_eq!(
        std::fs::read(copy.join("var/lib/deep/er/file")).unwrap(),
        vec![7u8; 300_000]
    );
    assert_eq!(
        m(&copy.join("bin")).mode(),
        m(&src.join("bin")).mode(),
        "directory mode"
    );
    if let Ok(o) = Command::new("getfattr")
        .args(["--only-values", "-n", "user.bulkhead"])
        .arg(src.join("home/app/owned"))
        .output()
    {
        if o.status.success() {
            let c = Command::new("getfattr")
                .args(["--only-values", "-n", "user.bulkhead"])
                .arg(copy.join("home/app/owned"))
                .output()
                .unwrap();
            assert_eq!(c.stdout, o.stdout, "xattr copied");
        }
    }
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_fifo()
    }
}

/// Writes to the snapshot stay there.
fn check_isolated(s: &Snapshot) {
    std::fs::write(s.root.join("etc/hostname"), "changed\n").unwrap();
    std::fs::write(s.root.join("new-file"), "x").unwrap();
    assert_eq!(
        std::fs::read_to_string(s.lower.join("etc/hostname")).unwrap(),
        "busybox\n"
    );
    assert!(!s.lower.join("new-file").exists());
}

fn check_registry(s: &Snapshot) {
    assert!(s.state_dir.starts_with(snapshot::state_root()));
    if s.method == Method::Overlay {
        // Nothing on the host: one shared mount point, used inside each sandbox's namespace.
        assert_eq!(s.state_dir, snapshot::state_root().join(".overlay"));
        assert_eq!(std::fs::read_dir(&s.state_dir).unwrap().count(), 0);
        return;
    }
    // One file: "pid starttime", then the copy's path, written before the copy exists.
    let text = std::fs::read_to_string(&s.state_dir).unwrap();
    let (owner, path) = text.split_once('\n').unwrap();
    assert!(
        owner.starts_with(&format!("{} ", std::process::id())),
        "{owner}"
    );
    {
        assert_eq!(path, s.root.to_str().unwrap());
        let name = s.root.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(".#bulkhead-"), "{name}");
        assert_eq!(
            s.root.parent(),
            s.lower
                .parent()
                .map(|p| p.join(snapshot::SNAPSHOT_DIR))
                .as_deref()
        );
    }
}

fn discard_and_check(mut s: Snapshot) {
    let (root, state) = (s.root.clone(), s.state_dir.clone());
    let overlay = s.method == Method::Overlay;
    s.discard().unwrap();
    assert!(!root.exists(), "{} still there", root.display());
    if overlay {
        // The shared mount point stays, empty.
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
    } else {
        assert!(!state.exists(), "{} still there", state.display());
    }
    s.discard().unwrap();
}

#[test]
fn btrfs_snapshot_of_an_imported_image() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let mut store = Store::create(200);
    let image = store.import_busybox("bb");
    let s = snapshot::create(&image, Choice::Auto).unwrap();
    assert_eq!(s.method, Method::Btrfs);
    assert_eq!(s.why, "ROOTFS is a btrfs subvolume");
    assert_eq!(s.lower, image);
    check_registry(&s);
    check_isolated(&s);
    // The image list does not show the hidden snapshot.
    let list = store.ok(&["image", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(v[0]["name"], "bb");
    assert_eq!(v[0]["subvolume"], true);
    // A subvolume made inside the sandbox, with one inside that: discard destroys them first.
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "create",
            s.root.join("var/nested").to_str().unwrap(),
        ],
    );
    sh(
        "btrfs",
        &[
            "-q",
            "subvolume",
            "create",
            s.root.join("var/nested/deeper").to_str().unwrap(),
        ],
    );
    std::fs::write(s.root.join("var/nested/deeper/f"), "x").unwrap();
    discard_and_check(s);
    assert!(hidden_snapshots(&store.mnt).is_empty());
    // Only(Btrfs) works too, and Drop discards.
    let s = snapshot::create(&image, Choice::Only(Method::Btrfs)).unwrap();
    assert_eq!(s.method, Method::Btrfs);
    let (root, state) = (s.root.clone(), s.state_dir.clone());
    drop(s);
    assert!(!root.exists() && !state.exists());
    // A directory on btrfs that is not a subvolume: reflink under Auto, refused by Only(Btrfs).
    let plain = store.mnt.join("plain");
    busybox_root(&plain);
    let s = snapshot::create(&plain, Choice::Auto).unwrap();
    assert_eq!(s.method, Method::Reflink);
    assert_has(&s.why, "not a subvolume");
    discard_and_check(s);
    let e = snapshot::create(&plain, Choice::Only(Method::Btrfs)).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("not a subvolume"), "{e}");
    assert!(hidden_snapshots(&store.mnt).is_empty());
}

fn pool_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(".#bulkhead-pool"))
        .collect();
    v.sort();
    v
}

fn wait_pool(dir: &Path, want: impl Fn(&[String]) -> bool) -> Vec<String> {
    let t0 = std::time::Instant::now();
    loop {
        let p = pool_entries(dir);
        if want(&p) {
            return p;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the pool never got there: {p:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_read_only_image_keeps_snapshots_ready_and_never_serves_old_content() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let mut store = Store::create(200);
    let image = store.import_busybox("ro");
    let img = image.to_str().unwrap();
    // `image import --read-only` makes such an image; the flag is the subvolume's own.
    let src = TmpDir::new("ro-src");
    busybox_root(&src.0.join("r"));
    store.ok(&[
        "image",
        "import",
        "--read-only",
        src.0.join("r").to_str().unwrap(),
        "ro2",
    ]);
    let out = sh(
        "btrfs",
        &[
            "property",
            "get",
            store.mnt.join("ro2").to_str().unwrap(),
            "ro",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ro=true");
    store.ok(&["image", "rm", "ro2"]);
    sh("btrfs", &["property", "set", img, "ro", "true"]);
    // The first start has no pool yet; after it, the pool is filled in the background.
    let mut s = snapshot::create(&image, Choice::Auto).unwrap();
    assert_eq!(s.why, "ROOTFS is a btrfs subvolume");
    let key = s.pool.clone().expect("a read-only subvolume has a pool");
    s.discard().unwrap();
    snapshot::refill_pool(&key);
    let first = wait_pool(&store.mnt, |p| p.len() == snapshot::POOL_SIZE);
    // The next start takes one of them (a rename), and it is a full, private, writable copy.
    let s = snapshot::create(&image, Choice::Auto).unwrap();
    assert_has(&s.why, "made ahead of time");
    check_isolated(&s);
    check_registry(&s);
    discard_and_check(s);
    assert_eq!(pool_entries(&store.mnt).len(), snapshot::POOL_SIZE - 1);
    // The image changes (writable, modified, read-only again): the old pool is not used...
    sh("btrfs", &["property", "set", img, "ro", "false"]);
    std::fs::write(image.join("etc/changed"), "new content").unwrap();
    sh("btrfs", &["property", "set", img, "ro", "true"]);
    let s = snapshot::create(&image, Choice::Auto).unwrap();
    assert!(!s.why.contains("ahead"), "{}", s.why);
    assert_eq!(
        std::fs::read_to_string(s.root.join("etc/changed")).unwrap(),
        "new content"
    );
    let key = s.pool.clone().unwrap();
    discard_and_check(s);
    // ...and the next fill replaces it with snapshots of the new content.
    snapshot::refill_pool(&key);
    let now = wait_pool(&store.mnt, |p| {
        p.len() == snapshot::POOL_SIZE && p.iter().all(|n| !first.contains(n))
    });
    let s = snapshot::create(&image, Choice::Auto).unwrap();
    assert_has(&s.why, "made ahead of time");
    assert!(s.root.join("etc/changed").exists(), "{now:?}");
    discard_and_check(s);
    // A writable image has no pool.
    sh("btrfs", &["property", "set", img, "ro", "false"]);
    let s = snapshot::create(&image, Choice::Auto).unwrap();
    assert!(s.pool.is_none());
    discard_and_check(s);
    // Removing the image removes its pool.
    store.ok(&["image", "rm", "ro"]);
    assert!(pool_entries(&store.mnt).is_empty());
}

#[test]
fn reflink_on_xfs() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let fs = LoopFs::new("xfs", 300);
    let src = busybox_root(&fs.mnt.join("root"));
    decorate(&src);
    let s = snapshot::create(&src, Choice::Auto).unwrap();
    assert_eq!(s.method, Method::Reflink);
    assert_eq!(s.why, "ROOTFS is on xfs: reflink copy");
    check_registry(&s);
    check_copy(&src, &s.root);
    check_isolated(&s);
    // Shared extents: the copy took (almost) no new data blocks.
    discard_and_check(s);
    let s = snapshot::create(&src, Choice::Only(Method::Reflink)).unwrap();
    assert_eq!(s.method, Method::Reflink);
    discard_and_check(s);
    let s = snapshot::create(&src, Choice::Only(Method::Copy)).unwrap();
    assert_eq!(s.method, Method::Copy);
    check_copy(&src, &s.root);
    discard_and_check(s);
    assert!(fs.snapshots().is_empty());
}

#[test]
fn xfs_without_reflink_falls_back_or_refuses() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let fs = LoopFs::new("xfs-noreflink", 300);
    let src = busybox_root(&fs.mnt.join("root"));
    let e = snapshot::create(&src, Choice::Only(Method::Reflink)).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("XFS file system made without reflink"),
        "{text}"
    );
    assert!(text.contains("hint: mkfs.xfs -m reflink=1"), "{text}");
    assert!(
        fs.snapshots().is_empty(),
        "partial copy left: {:?}",
        fs.snapshots()
    );
    let s = snapshot::create(&src, Choice::Auto).unwrap();
    assert_eq!(s.method, Method::Overlay);
    assert!(s.why.starts_with("xfs without reflink"), "{}", s.why);
    assert!(
        s.why.ends_with("overlayfs with the upper layer on tmpfs"),
        "{}",
        s.why
    );
    assert!(fs.snapshots().is_empty());
    discard_and_check(s);
}

#[test]
fn overlay_on_ext4() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let dir = TmpDir::new("ext4");
    let src = busybox_root(&dir.0.join("root"));
    let s = snapshot::create(&src, Choice::Auto).unwrap();
    assert_eq!(s.method, Method::Overlay);
    assert_eq!(
        s.why,
        "ext4 cannot reflink: overlayfs with the upper layer on tmpfs"
    );
    assert_eq!(s.root, s.state_dir.join("root"));
    assert!(!s.root.exists(), "the sandbox makes root itself");
    assert_eq!(s.lower, std::fs::canonicalize(&src).unwrap());
    check_registry(&s);
    // What the sandbox does, in a mount namespace of its own: tmpfs, overlay, write.
    let script = format!(
        "set -e; mount -t tmpfs tmpfs {s}; mkdir {s}/upper {s}/work {s}/root; \
         mount -t overlay overlay -o lowerdir={l},upperdir={s}/upper,workdir={s}/work {s}/root; \
         echo changed > {s}/root/etc/hostname; {s}/root/bin/busybox cat {s}/root/etc/hostname",
        s = s.state_dir.display(),
        l = s.lower.display()
    );
    let o = sh(
        "unshare",
        &["-m", "--propagation", "private", "sh", "-c", &script],
    );
    assert_eq!(common::stdout(&o), "changed\n");
    assert_eq!(
        std::fs::read_to_string(src.join("etc/hostname")).unwrap(),
        "busybox\n"
    );
    discard_and_check(s);
    // A path overlayfs options cannot carry: the sandbox attaches the source it holds on a
    // directory of bulkhead's own, and only that one is named in the options.
    let odd = busybox_root(&dir.0.join("a,b"));
    let s = snapshot::create(&odd, Choice::Only(Method::Overlay)).unwrap();
    assert_eq!(s.method, Method::Overlay);
    discard_and_check(s);
}

#[test]
fn copy_on_ext4_and_btrfs_refused_there() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let dir = TmpDir::new("ext4");
    let src = busybox_root(&dir.0.join("root"));
    decorate(&src);
    let s = snapshot::create(&src, Choice::Only(Method::Copy)).unwrap();
    assert_eq!(s.method, Method::Copy);
    assert_eq!(s.why, "--snapshot copy");
    check_registry(&s);
    check_copy(&src, &s.root);
    check_isolated(&s);
    discard_and_check(s);
    // --snapshot btrfs / reflink on ext4: bad input, says what the file system is and what to do.
    let e = snapshot::create(&src, Choice::Only(Method::Btrfs)).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    let t = e.to_string();
    assert!(t.contains("is on ext4, not btrfs"), "{t}");
    assert!(t.contains("bulkhead image import"), "{t}");
    let e = snapshot::create(&src, Choice::Only(Method::Reflink)).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string()
            .contains("is on ext4, which cannot share extents"),
        "{e}"
    );
    let e = snapshot::create(&dir.0.join("missing"), Choice::Auto).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("No such file or directory"), "{e}");
    // The private snapshot directory stays (empty) beside the source, as a cache would.
    assert_eq!(
        std::fs::read_dir(&dir.0).unwrap().count(),
        2,
        "only the source and the snapshot directory are left"
    );
    assert_eq!(
        std::fs::read_dir(dir.0.join(snapshot::SNAPSHOT_DIR))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn full_file_system_during_copy() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let fs = LoopFs::new("ext4", 16);
    let src = busybox_root(&fs.mnt.join("root"));
    std::fs::write(src.join("filler"), vec![1u8; 8 << 20]).unwrap();
    let e = snapshot::create(&src, Choice::Only(Method::Copy)).unwrap_err();
    assert_eq!(e.exit_code(), 1, "{e}");
    let t = e.to_string();
    assert!(
        t.contains(&format!(
            "the file system holding {} is full",
            fs.mnt.display()
        )),
        "{t}"
    );
    assert!(t.contains("while copying"), "{t}");
    assert!(
        fs.snapshots().is_empty(),
        "partial copy left: {:?}",
        fs.snapshots()
    );
}

#[test]
fn stale_entries_are_cleaned() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let _one_at_a_time = CLEANING.lock().unwrap_or_else(|e| e.into_inner());
    let fs = LoopFs::new("btrfs", 200);
    let src = fs.mnt.join("root");
    sh(
        "btrfs",
        &["-q", "subvolume", "create", src.to_str().unwrap()],
    );
    busybox_root(&src);
    let dead = {
        let mut c = Command::new("sleep").arg("0").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    };
    // A btrfs snapshot whose owner died (as with kill -9): a dead PID in `owner`.
    let s = snapshot::create(&src, Choice::Auto).unwrap();
    assert_eq!(s.method, Method::Btrfs);
    let (root, state) = (s.root.clone(), s.state_dir.clone());
    std::fs::write(&state, format!("{dead} 12345\n{}", root.display())).unwrap();
    std::mem::forget(s);
    // A live one of this process stays.
    let live = snapshot::create(&src, Choice::Auto).unwrap();
    // Entries in the older layout (a directory with `owner` and `snapshot`) are read too.
    // An entry of a dead process whose record names something that is not a snapshot.
    let victim = fs.mnt.join("victim");
    std::fs::create_dir(&victim).unwrap();
    let forged = snapshot::state_root().join(format!("{dead}-999999"));
    std::fs::create_dir_all(&forged).unwrap();
    bulkhead_testkit::write(
        forged.join("snapshot"),
        victim.as_os_str().as_encoded_bytes(),
    );
    // An overlay entry of a dead process, with a tmpfs still mounted in it.
    let mounted = snapshot::state_root().join(format!("{dead}-999998"));
    std::fs::create_dir_all(&mounted).unwrap();
    std::fs::write(mounted.join("owner"), format!("{dead} 1\n")).unwrap();
    sh(
        "mount",
        &["-t", "tmpfs", "tmpfs", mounted.to_str().unwrap()],
    );

    // A copy in the images directory that no entry names (a crash, then a reboot), and one
    // whose entry exists: the first goes (once per boot, so the marker is removed here).
    let images = PathBuf::from(std::env::var_os("BULKHEAD_IMAGES_DIR").unwrap());
    let orphan = images.join(format!(".#bulkhead-root-{dead}-5"));
    std::fs::create_dir_all(orphan.join("etc")).unwrap();
    std::fs::write(orphan.join("etc/hostname"), "x").unwrap();
    let owned_name = live.root.file_name().unwrap().to_owned();
    let owned = images.join(&owned_name);
    std::fs::create_dir_all(&owned).unwrap();
    let _ = std::fs::remove_file(snapshot::state_root().join(".orphans-checked"));

    let lines = snapshot::clean_stale(|| bulkhead::image::images_dir().ok());
    let all = lines.join("\n");
    assert!(
        all.contains(&format!(
            "removed the orphaned snapshot {}",
            orphan.display()
        )),
        "{all}"
    );
    assert!(!orphan.exists());
    assert!(owned.exists(), "its entry names it");
    std::fs::remove_dir(&owned).unwrap();
    assert!(
        all.contains(&format!("removed the btrfs snapshot {}", root.display())),
        "{all}"
    );
    assert!(
        all.contains(&format!("left {} alone", victim.display())),
        "{all}"
    );
    assert!(
        all.contains(&format!("unmounted {}", mounted.display())),
        "{all}"
    );
    assert!(!root.exists() && !state.exists(), "{all}");
    assert!(!forged.exists() && !mounted.exists(), "{all}");
    assert!(victim.exists(), "never delete what is not a snapshot");
    assert!(!is_mounted(&mounted));
    assert!(
        live.root.exists() && live.state_dir.exists(),
        "a live entry stays"
    );
    discard_and_check(live);
    assert!(fs.snapshots().is_empty());
}

/// Not a test on its own: the body of `kill_9_leaves_nothing_after_clean_stale`'s child.
#[test]
fn helper_hold_snapshot() {
    // A child of kill_9_leaves_nothing_after_clean_stale: its environment is the parent's.
    let _suite = crate::suite::shared();
    let Ok(src) = std::env::var("BULKHEAD_TEST_HOLD") else {
        return;
    };
    let s = snapshot::create(Path::new(&src), Choice::Auto).unwrap();
    let report = std::env::var("BULKHEAD_TEST_HOLD_REPORT").unwrap();
    std::fs::write(report, s.root.as_os_str().as_encoded_bytes()).unwrap();
    // Killed by the parent long before this ends.
    std::thread::sleep(Duration::from_secs(600));
    drop(s);
}

#[test]
fn kill_9_leaves_nothing_after_clean_stale() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let _one_at_a_time = CLEANING.lock().unwrap_or_else(|e| e.into_inner());
    let fs = LoopFs::new("btrfs", 200);
    let src = fs.mnt.join("root");
    sh(
        "btrfs",
        &["-q", "subvolume", "create", src.to_str().unwrap()],
    );
    busybox_root(&src);
    let report = fs.mnt.join("report");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "snapshot_image::helper_hold_snapshot",
            "--test-threads=1",
        ])
        .env("BULKHEAD_TEST_HOLD", &src)
        .env("BULKHEAD_TEST_HOLD_REPORT", &report)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let root = loop {
        if let Ok(r) = std::fs::read_to_string(&report) {
            if !r.is_empty() {
                break PathBuf::from(r);
            }
        }
        if t.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child made no snapshot");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(root.exists());
    child.kill().unwrap();
    child.wait().unwrap();
    let lines = snapshot::clean_stale(|| bulkhead::image::images_dir().ok());
    assert!(!root.exists(), "{lines:?}");
    assert!(fs.snapshots().is_empty());
    let entry = format!("{}-", child.id());
    let left: Vec<_> = std::fs::read_dir(snapshot::state_root())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&entry))
        .collect();
    assert!(left.is_empty(), "{lines:?}");
}

#[test]
fn fifty_parallel_snapshots_never_collide() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let fs = LoopFs::new("btrfs", 200);
    let src = fs.mnt.join("root");
    sh(
        "btrfs",
        &["-q", "subvolume", "create", src.to_str().unwrap()],
    );
    busybox_root(&src);
    let snaps: Vec<Snapshot> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..50)
            .map(|i| {
                let src = &src;
                sc.spawn(move || {
                    let choice = if i % 2 == 0 {
                        Choice::Auto
                    } else {
                        Choice::Only(Method::Overlay)
                    };
                    snapshot::create(src, choice).unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // On-disk snapshots each have their own path; overlays all use the one mount point, which
    // each sandbox mounts in its own mount namespace.
    let mut roots: Vec<_> = snaps
        .iter()
        .filter(|s| s.method != Method::Overlay)
        .map(|s| s.root.clone())
        .collect();
    roots.sort();
    roots.dedup();
    assert_eq!(roots.len(), 25);
    assert_eq!(fs.snapshots().len(), 25, "{:?}", fs.snapshots());
    for s in snaps {
        discard_and_check(s);
    }
    assert!(fs.snapshots().is_empty());
}

#[test]
fn image_store_round_trip() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let mut store = Store::create(256);
    let rec = std::fs::read_to_string(&store.record).unwrap();
    assert!(
        rec.contains(&format!("file = \"{}\"", store.file.display())),
        "{rec}"
    );
    assert_eq!(loops_of(&store.file).len(), 1);
    let st: serde_json::Value =
        serde_json::from_str(&store.ok(&["image", "store", "status", "--json"])).unwrap();
    assert_eq!(st["mounted"], true);
    assert_eq!(st["images"], 0);
    // Import a directory and tarballs.
    store.import_busybox("from-dir");
    let src = unique("tarsrc");
    busybox_root(&src);
    decorate(&src);
    store.extra.push(src.clone());
    let mut kinds = vec![("tar", "-cf"), ("tar.gz", "-czf")];
    if tool_exists("zstd") {
        kinds.push(("tar.zst", "--zstd -cf"));
    }
    for (ext, flags) in &kinds {
        let tarball = unique("busybox").with_extension(ext);
        store.extra.push(tarball.clone());
        let cmd = format!(
            "tar --xattrs -C {} {flags} {} .",
            src.display(),
            tarball.display()
        );
        sh("sh", &["-c", &cmd]);
        let name = format!("t-{}", ext.replace('.', "-"));
        let out = store.ok(&["image", "import", tarball.to_str().unwrap(), &name]);
        assert!(out.contains("btrfs subvolume"), "{out}");
        check_copy(&src, &store.mnt.join(&name));
    }
    let list = store.ok(&["image", "list"]);
    assert!(list.starts_with("NAME"), "{list}");
    assert!(
        list.contains("from-dir") && list.contains("t-tar-gz"),
        "{list}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&store.ok(&["image", "list", "--json"])).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 1 + kinds.len());
    for i in arr {
        assert_eq!(i["subvolume"], true);
        assert!(i["size"].as_u64().unwrap() > 1 << 20, "{i}");
    }
    let out = store.ok(&["image", "rm", "t-tar"]);
    assert!(out.contains("removed the image t-tar"), "{out}");
    assert!(!store.mnt.join("t-tar").exists());
    // umount keeps the file; mount brings the images back; a second mount says so.
    store.ok(&["image", "store", "umount"]);
    assert!(!is_mounted(&store.mnt));
    assert!(loops_of(&store.file).is_empty(), "loop device detached");
    assert!(store.file.exists());
    let out = store.ok(&["image", "store", "umount"]);
    assert!(out.contains("is not mounted"), "{out}");
    let st = store.ok(&["image", "store", "status"]);
    assert!(st.contains("not mounted"), "{st}");
    let o = store.cli(&["image", "list"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(common::stderr(&o).contains("hint: mount it: bulkhead image store mount"));
    store.ok(&["image", "store", "mount"]);
    let out = store.ok(&["image", "store", "mount"]);
    assert!(out.contains("already mounted"), "{out}");
    assert!(store.mnt.join("from-dir/bin/busybox").exists());
    store.ok(&["image", "store", "umount"]);
    assert!(loops_of(&store.file).is_empty());
}

#[test]
fn image_bad_input_leaves_nothing() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let s = Store::paths();
    let check_nothing = |s: &Store| {
        assert!(!s.file.exists(), "file left");
        assert!(!s.mnt.exists(), "mount point left");
        assert!(!s.record.exists(), "record left");
        assert!(loops_of(&s.file).is_empty(), "loop device left");
    };
    let create = |size: &str| {
        s.cli(&[
            "image",
            "store",
            "create",
            "--size",
            size,
            "--mount",
            s.mnt.to_str().unwrap(),
            s.file.to_str().unwrap(),
        ])
    };
    let o = create("100000T");
    assert_eq!(o.status.code(), Some(2));
    let e = common::stderr(&o);
    assert!(e.contains("does not fit") && e.contains("free"), "{e}");
    check_nothing(&s);
    let o = create("100M");
    assert_eq!(o.status.code(), Some(2));
    assert_has(&common::stderr(&o), "mkfs.btrfs needs at least 109M");
    check_nothing(&s);
    let o = create("lots");
    assert_eq!(o.status.code(), Some(2));
    check_nothing(&s);
    // An existing PATH is never formatted.
    std::fs::write(&s.file, "precious").unwrap();
    let o = create("200M");
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("exists already"));
    assert_eq!(std::fs::read_to_string(&s.file).unwrap(), "precious");
    std::fs::remove_file(&s.file).unwrap();
    check_nothing(&s);
    // A non-empty mount point.
    std::fs::create_dir(&s.mnt).unwrap();
    std::fs::write(s.mnt.join("x"), "").unwrap();
    let o = create("200M");
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("is not empty"));
    assert!(!s.file.exists() && loops_of(&s.file).is_empty());
    std::fs::remove_dir_all(&s.mnt).unwrap();

    // Imports into a real store: bad names, an existing name, a missing source, a non-tarball.
    let mut store = Store::create(200);
    store.import_busybox("bb");
    let src = unique("src");
    busybox_root(&src);
    store.extra.push(src.clone());
    for bad in ["a/b", "..", ".hidden", "-x", "x y"] {
        let o = store.cli(&["image", "import", "--", src.to_str().unwrap(), bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(common::stderr(&o).contains("is not an image name"), "{bad}");
    }
    let o = store.cli(&["image", "import", src.to_str().unwrap(), "bb"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("exists already"));
    let o = store.cli(&["image", "import", "/nonexistent/root", "other"]);
    assert_eq!(o.status.code(), Some(2));
    let notes = unique("notes.txt");
    std::fs::write(&notes, "hi").unwrap();
    store.extra.push(notes.clone());
    let o = store.cli(&["image", "import", notes.to_str().unwrap(), "other"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("neither a directory nor a tarball"));
    // A corrupt tarball fails (exit 1) and leaves no half image.
    let bad_tar = unique("bad").with_extension("tar.gz");
    std::fs::write(&bad_tar, "not gzip").unwrap();
    store.extra.push(bad_tar.clone());
    let o = store.cli(&["image", "import", bad_tar.to_str().unwrap(), "other"]);
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    let names: Vec<String> = std::fs::read_dir(&store.mnt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["bb".to_string()]);
    let o = store.cli(&["image", "rm", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("images: bb"));
    // A second store while one is recorded.
    let other = unique("other").with_extension("img");
    let o = store.cli(&[
        "image",
        "store",
        "create",
        "--size",
        "200M",
        other.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("already recorded"));
    assert!(!other.exists());
}

/// Medians of create()+discard() for each method on a busybox root (run with --nocapture
/// to see them; the README quotes them).
#[test]
fn create_discard_timings() {
    let _suite = suite();
    if !setup() {
        return;
    }
    const RUNS: usize = 100;
    let mut store = Store::create(256);
    let btrfs_src = store.import_busybox("bb");
    let xfs = LoopFs::new("xfs", 300);
    let xfs_src = busybox_root(&xfs.mnt.join("root"));
    let dir = TmpDir::new("ext4");
    let ext4_src = busybox_root(&dir.0.join("root"));
    let cases = [
        (Method::Btrfs, &btrfs_src),
        (Method::Reflink, &xfs_src),
        (Method::Overlay, &ext4_src),
        (Method::Copy, &ext4_src),
    ];
    for (m, src) in cases {
        let (mut create, mut discard) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let t = Instant::now();
            let mut s = snapshot::create(src, Choice::Only(m)).unwrap();
            create.push(t.elapsed());
            let t = Instant::now();
            s.discard().unwrap();
            discard.push(t.elapsed());
        }
        create.sort();
        discard.sort();
        eprintln!(
            "TIMING {m:8} create median {:>9.3} ms  discard median {:>9.3} ms  ({RUNS} runs, busybox root)",
            create[RUNS / 2].as_secs_f64() * 1e3,
            discard[RUNS / 2].as_secs_f64() * 1e3
        );
    }
    assert!(hidden_snapshots(&store.mnt).is_empty() && xfs.snapshots().is_empty());
    // What every spawn does first.
    let _one_at_a_time = CLEANING.lock().unwrap_or_else(|e| e.into_inner());
    let mut clean = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        snapshot::clean_stale(|| bulkhead::image::images_dir().ok());
        clean.push(t.elapsed());
    }
    clean.sort();
    eprintln!(
        "TIMING clean_stale median {:>9.3} ms  ({RUNS} runs)",
        clean[RUNS / 2].as_secs_f64() * 1e3
    );
}

#[test]
fn import_without_a_store_makes_plain_directories() {
    let _suite = suite();
    if !setup() {
        return;
    }
    let dir = TmpDir::new("images");
    let src = busybox_root(&dir.0.join("src"));
    let images = dir.0.join("images");
    let record = dir.0.join("no-store.toml");
    let cli = |args: &[&str]| {
        Command::new(bulkhead_testkit::bins::this_build())
            .env("BULKHEAD_STORE_RECORD", &record)
            .env("BULKHEAD_IMAGES_DIR", &images)
            .args(args)
            .output()
            .unwrap()
    };
    let o = cli(&["image", "store", "status"]);
    assert!(common::stdout(&o).contains("no image store is recorded"));
    let o = cli(&["image", "import", src.to_str().unwrap(), "plain"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert_has(&common::stdout(&o), "(directory,");
    let v: serde_json::Value =
        serde_json::from_str(&common::stdout(&cli(&["image", "list", "--json"]))).unwrap();
    assert_eq!(v[0]["name"], "plain");
    assert_eq!(v[0]["subvolume"], false);
    // The plain image snapshots as overlay on ext4.
    let s = snapshot::create(&images.join("plain"), Choice::Auto).unwrap();
    assert_eq!(s.method, Method::Overlay);
    discard_and_check(s);
    // A directory that holds the images directory cannot be imported into it.
    let o = cli(&["image", "import", dir.0.to_str().unwrap(), "loop"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("would contain itself"));
    assert!(cli(&["image", "rm", "plain"]).status.success());
    assert_eq!(std::fs::read_dir(&images).unwrap().count(), 0);
}
