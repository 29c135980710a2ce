//! The process table from /proc, bounded: who is whose parent, and what one process is (its
//! user, executable, command line, cgroups). Each process is read through one descriptor of
//! its /proc/PID directory, so all its files describe the same process even if the PID is
//! reused meanwhile (then the reads fail, never mix two processes).

use rustix::fs::{openat, readlinkat, statat, AtFlags, Mode, OFlags, CWD};
use std::io::Read;
use std::os::fd::OwnedFd;

/// At most this many processes are read in one scan of /proc.
pub const MAX_PROCS: usize = 1 << 17;
/// At most this many bytes of a command line are read.
pub const MAX_CMDLINE: usize = 4096;
/// At most this many bytes of any other /proc file are read.
const MAX_FILE: usize = 16 << 10;

/// One scan of /proc: `(pid, parent pid)` of every process (not threads), in PID order.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub parents: Vec<(i32, i32)>,
    /// The scan stopped at [`MAX_PROCS`].
    pub truncated: bool,
}

/// The PIDs in /proc now, at most [`MAX_PROCS`] (the bool: there were more).
pub fn pids() -> (Vec<i32>, bool) {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (Vec::new(), false);
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if out.len() == MAX_PROCS {
            return (out, true);
        }
        out.push(pid);
    }
    out.sort_unstable();
    (out, false)
}

/// Every process now as [`read`] sees it (kernel threads and processes gone meanwhile left
/// out), at most [`MAX_PROCS`] of them (the bool: there were more).
pub fn all() -> (Vec<Proc>, bool) {
    let (pids, truncated) = pids();
    (pids.into_iter().filter_map(read).collect(), truncated)
}

/// Every process with its parent (processes gone during the scan are left out).
pub fn table() -> Table {
    let (pids, truncated) = pids();
    let parents = pids
        .into_iter()
        .filter_map(|p| {
            let ppid = crate::process::parent(u32::try_from(p).ok()?)?;
            Some((p, i32::try_from(ppid).ok()?))
        })
        .collect();
    Table { parents, truncated }
}

/// The descendants of `root` in `table`, parents before their children (breadth first).
pub fn descendants(root: i32, table: &Table) -> Vec<i32> {
    let mut children: std::collections::HashMap<i32, Vec<i32>> = Default::default();
    for &(c, pp) in &table.parents {
        children.entry(pp).or_default().push(c);
    }
    let mut seen = std::collections::HashSet::from([root]);
    let mut out = Vec::new();
    let mut next = 0;
    let mut frontier = vec![root];
    // Breadth first; `seen` ends a ring (impossible in a real table, possible in a torn scan).
    while let Some(&p) = frontier.get(next) {
        next += 1;
        for &c in children.get(&p).map_or(&[][..], Vec::as_slice) {
            if seen.insert(c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// What a process is, as placement rules see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    /// The real UID.
    pub uid: u32,
    /// The command name (`comm`, 15 bytes at most).
    pub comm: String,
    /// The executable's path (None: a kernel thread, or not readable).
    pub exe: Option<String>,
    /// The executable's (device, inode), by stat through /proc/PID/exe: the file itself,
    /// whatever path the process's own mount namespace shows for it.
    pub exe_id: Option<(u64, u64)>,
    /// The executable file's owner (root for what a package installed; a user's own copy is
    /// the user's).
    pub exe_owner: Option<u32>,
    /// The command line, its arguments joined by spaces (as `ps` shows it), at most
    /// [`MAX_CMDLINE`] bytes.
    pub cmdline: String,
    /// Start time, clock ticks after boot (with the PID, names one process for good).
    pub start: u64,
    /// /proc/PID/cgroup.
    pub cgroup: String,
}

/// Read one process (None: gone, a kernel thread, or not readable).
pub fn read(pid: i32) -> Option<Proc> {
    let dir = openat(
        CWD,
        format!("/proc/{pid}"),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let stat = read_at(&dir, "stat", MAX_FILE)?;
    let stat = String::from_utf8_lossy(&stat);
    let flags = crate::process::parse_stat_flags(&stat)?;
    if flags & 0x0020_0000 != 0 {
        return None; // PF_KTHREAD
    }
    // A zombie (exited, not reaped yet: a postmaster just stopped) runs nothing and is in no
    // slice any more; judged or moved it would be a false finding.
    if matches!(stat_state(&stat), Some('Z' | 'X')) {
        return None;
    }
    let comm = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?.to_string();
    let status = read_at(&dir, "status", MAX_FILE)?;
    let uid = String::from_utf8_lossy(&status)
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())?;
    let cmdline = read_at(&dir, "cmdline", MAX_CMDLINE).unwrap_or_default();
    let cgroup = read_at(&dir, "cgroup", MAX_FILE).unwrap_or_default();
    let exe = readlinkat(&dir, "exe", Vec::new())
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    let exe_st = statat(&dir, "exe", AtFlags::empty()).ok();
    let exe_id = exe_st.as_ref().map(|st| (st.st_dev, st.st_ino));
    let exe_owner = exe_st.as_ref().map(|st| st.st_uid);
    Some(Proc {
        pid,
        ppid: i32::try_from(crate::process::parse_stat_ppid(&stat)?).ok()?,
        uid,
        comm,
        exe,
        exe_id,
        exe_owner,
        cmdline: join_cmdline(&cmdline),
        start: crate::process::parse_stat_start(&stat)?,
        cgroup: String::from_utf8_lossy(&cgroup).into_owned(),
    })
}

/// The state letter of /proc/PID/stat (`R`, `S`, `Z`...), after the command name.
fn stat_state(stat: &str) -> Option<char> {
    stat.get(stat.rfind(')')? + 1..)?
        .trim_start()
        .chars()
        .next()
}

/// The clock processes' start times are on: clock ticks since boot (/proc/uptime).
pub fn now_ticks() -> Option<u64> {
    let up = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = up.split_whitespace().next()?.parse().ok()?;
    Some((secs * crate::process::clock_ticks() as f64) as u64)
}

/// What a pidfile says, and what vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pidfile {
    pub pid: i32,
    /// The file's owner.
    pub owner: u32,
    /// When it was last written (its mtime), seconds since the epoch: a process that started
    /// later is not the one it was written for (a stale pidfile whose PID was reused).
    pub written: i64,
}

/// The PID a pidfile names (its first line), its owner and when it was written, or None when
/// there is no such file (a stopped service). The path is opened once by the host-path rule
/// ([`crate::hostpath`]: no symlink on the way that another user owns), decided on by
/// `fstat` of that descriptor (a regular file with one link: a hard link may be another
/// user's name for root's pidfile) and read through it, at most 4 KiB. Its directory must be
/// writable by root or the file's owner alone (not by others, nor by a group other than
/// root's): else anyone who can write there plants a pidfile while the service is down.
/// Err: why not.
pub fn read_pidfile(path: &std::path::Path) -> Result<Option<Pidfile>, String> {
    let hp = match crate::hostpath::HostPath::open(path) {
        Ok(h) => h,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if !hp.is_file() {
        return Err("is not a regular file".into());
    }
    let st = hp.stat();
    dir_trusted(&hp.real_path(), st.st_uid)?;
    if st.st_nlink != 1 {
        return Err(format!(
            "has {} hard links: another name for a file may be someone else's (a pidfile has one)",
            st.st_nlink
        ));
    }
    // The O_PATH handle opened again for reading: the same inode, not the name again.
    let fd = rustix::fs::open(
        crate::inroot::fd_path(hp.fd()),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| crate::error::errno_text(&e.into()))?;
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(4096)
        .read_to_string(&mut text)
        .map_err(|e| crate::error::errno_text(&e))?;
    let pid = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
        .filter(|&p| p > 0)
        .ok_or("does not start with a process ID")?;
    Ok(Some(Pidfile {
        pid,
        owner: st.st_uid,
        written: st.st_mtime,
    }))
}

/// The directory of a pidfile (the file's real path) is one only root or the file's owner
/// can write in.
fn dir_trusted(file: &std::path::Path, owner: u32) -> Result<(), String> {
    let Some(dir) = file.parent() else {
        return Ok(());
    };
    let d = crate::hostpath::HostPath::open(dir).map_err(|e| e.to_string())?;
    let st = d.stat();
    let mode = st.st_mode & 0o7777;
    let others = mode & 0o002 != 0;
    let group = mode & 0o020 != 0 && st.st_gid != 0;
    if st.st_uid != 0 && st.st_uid != owner || others || group {
        return Err(format!(
            "is in {}, a directory others can write in (owner UID {}, mode {mode:o}): anyone who can write there could plant it while the service is down",
            dir.display(),
            st.st_uid
        ));
    }
    Ok(())
}

/// /proc/PID/cgroup of one process (None: gone).
pub fn cgroup(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()
}

/// The arguments of a /proc/PID/cmdline, NUL-separated, joined by spaces. A process that
/// rewrote its arguments (PostgreSQL's "postgres: 15/main: backup \[local\] idle") may have
/// one long argument padded with NULs: trailing empty ones are dropped.
pub fn join_cmdline(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let args: Vec<&str> = text.split('\0').collect();
    let end = args
        .iter()
        .rposition(|a| !a.is_empty())
        .map_or(0, |i| i + 1);
    args[..end].join(" ")
}

fn read_at(dir: &OwnedFd, name: &str, cap: usize) -> Option<Vec<u8>> {
    let fd = openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .ok()?;
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(cap as u64)
        .read_to_end(&mut buf)
        .ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_in_order_and_bounded_by_cycles() {
        let t = Table {
            parents: vec![
                (1, 0),
                (10, 1),
                (11, 10),
                (12, 10),
                (13, 11),
                (20, 1),
                (30, 30),
            ],
            truncated: false,
        };
        assert_eq!(descendants(10, &t), vec![11, 12, 13]);
        assert_eq!(descendants(13, &t), Vec::<i32>::new());
        assert_eq!(descendants(30, &t), Vec::<i32>::new());
        // A ring (impossible in a real table) ends.
        let ring = Table {
            parents: vec![(2, 3), (3, 2)],
            truncated: false,
        };
        assert_eq!(descendants(2, &ring), vec![3]);
    }

    #[test]
    fn cmdline_joined_like_ps() {
        assert_eq!(join_cmdline(b"pg_dump\0-Z9\0db\0"), "pg_dump -Z9 db");
        assert_eq!(
            join_cmdline(b"postgres: 15/main: backup [local] idle\0\0\0\0"),
            "postgres: 15/main: backup [local] idle"
        );
        assert_eq!(join_cmdline(b""), "");
        assert_eq!(join_cmdline(b"\xff\0x"), "\u{fffd} x");
    }

    #[test]
    fn pidfiles() {
        let dir = std::env::temp_dir().join(format!("bh-pidfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x.pid");
        std::fs::write(&f, "4242\n/var/lib/x\n").unwrap();
        let pf = read_pidfile(&f).unwrap().unwrap();
        assert_eq!(pf.pid, 4242);
        assert_eq!(
            read_pidfile(&dir.join("gone.pid")).unwrap(),
            None,
            "missing: stopped"
        );
        std::fs::write(&f, "-1\n").unwrap();
        assert!(read_pidfile(&f).unwrap_err().contains("process ID"));
        assert!(read_pidfile(&dir).unwrap_err().contains("regular file"));
        let hard = dir.join("h.pid");
        std::fs::hard_link(&f, &hard).unwrap();
        assert!(read_pidfile(&hard).unwrap_err().contains("2 hard links"));
        std::fs::remove_file(&hard).unwrap();
        // A symlink this user owns is followed, as every host path's; one another user owns
        // is refused (root only can give a symlink away).
        std::fs::write(&f, "4242\n").unwrap();
        let link = dir.join("l.pid");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(read_pidfile(&link).unwrap().map(|x| x.pid), Some(4242));
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
            let e = read_pidfile(&link).unwrap_err();
            assert!(e.contains("l.pid"), "{e}");
        }
        // A directory others can write in (issue 40 #3): refused, saying where.
        std::fs::remove_file(&link).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = read_pidfile(&f).unwrap_err();
        assert!(e.contains("others can write"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn this_process_reads() {
        let me = read(std::process::id() as i32).expect("this process");
        assert_eq!(me.ppid as u32, std::os::unix::process::parent_id());
        assert!(me.exe.is_some());
        assert!(!me.cmdline.is_empty());
        let t = table();
        assert!(t
            .parents
            .iter()
            .any(|&(p, _)| p == std::process::id() as i32));
    }

    /// Issue 41 #6: a process that exited and is not reaped yet (a stopped postmaster) is
    /// not read: it runs nothing and is in no slice.
    #[test]
    fn a_zombie_is_not_read() {
        assert_eq!(stat_state("12 (a) b) Z 1 2"), Some('Z'));
        assert_eq!(stat_state("12 (sh) S 1 2"), Some('S'));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let t0 = std::time::Instant::now();
        // Not reaped: it stays a zombie until `wait` below.
        while std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| stat_state(&s))
            != Some('Z')
        {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "never a zombie"
            );
            std::thread::yield_now();
        }
        assert!(read(pid).is_none());
        child.wait().unwrap();
    }
}
