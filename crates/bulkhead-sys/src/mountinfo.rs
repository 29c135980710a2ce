//! /proc/self/mountinfo, the one parser: its lines as [`Mount`]s (read as bytes, so a mount
//! point that is not UTF-8 is kept), mount points below a directory, lazily detached.

use crate::statefile;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The most of mountinfo read (a limit like every other table's; a host has far less).
pub const MAX_BYTES: u64 = 64 << 20;

/// One line of mountinfo (proc_pid_mountinfo(5)):
/// `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The directory of the file system that is mounted here (`/` for the whole of it).
    pub root: PathBuf,
    /// Where it is mounted, its bytes as the kernel has them.
    pub point: PathBuf,
    /// The per-mount options, e.g. `rw,nosuid,relatime`.
    pub options: String,
    /// The optional fields, e.g. `shared:1`, `master:2`.
    pub optional: Vec<String>,
    pub fstype: String,
    /// The mount source (`/dev/loop0`, `none`, ...); empty when the kernel has none.
    pub source: String,
    /// The super block options, e.g. `rw,pagesize=2M`.
    pub super_options: String,
}

/// This process's mounts, from /proc/self/mountinfo.
pub fn read() -> io::Result<Vec<Mount>> {
    read_at(Path::new("/proc/self/mountinfo"))
}

/// The mounts in the mountinfo file `path` (another proc root in tests).
pub fn read_at(path: &Path) -> io::Result<Vec<Mount>> {
    Ok(parse(&statefile::read(path, MAX_BYTES)?))
}

/// Every well-formed line of a mountinfo text; a malformed line is skipped.
pub fn parse(text: &[u8]) -> Vec<Mount> {
    text.split(|&b| b == b'\n').filter_map(parse_line).collect()
}

fn parse_line(line: &[u8]) -> Option<Mount> {
    // Space is escaped (\040) in every field, so " - " is only ever the separator.
    let sep = line.windows(3).position(|w| w == b" - ")?;
    let pre: Vec<&[u8]> = line[..sep]
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .collect();
    let [_id, _parent, _dev, root, point, rest @ ..] = pre.as_slice() else {
        return None;
    };
    let (options, optional): (&[u8], &[&[u8]]) = match rest {
        [options, optional @ ..] => (options, optional),
        [] => (b"", &[]),
    };
    // One space between fields; the source may be empty (two spaces), so no folding here.
    let mut post = line[sep + 3..].split(|&b| b == b' ');
    let fstype = post.next().filter(|f| !f.is_empty())?;
    let source = post.next()?;
    let super_options = post.next().unwrap_or_default();
    Some(Mount {
        root: unescape(root),
        point: unescape(point),
        options: text(options),
        optional: optional.iter().map(|f| text(f)).collect(),
        fstype: text(fstype),
        source: text(&unescape_bytes(source)),
        super_options: text(super_options),
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The mount on top at `point` (its last line), if anything is mounted there; none when
/// mountinfo cannot be read.
pub fn top_at(point: &Path) -> Option<Mount> {
    read().ok()?.into_iter().rev().find(|m| m.point == point)
}

/// Mount points at or below `dir` in this mount namespace, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = read()
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.point)
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
pub fn unescape(s: impl AsRef<[u8]>) -> PathBuf {
    PathBuf::from(OsString::from_vec(unescape_bytes(s.as_ref())))
}

fn unescape_bytes(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            let value = oct.iter().try_fold(0u16, |v, c| {
                (b'0'..=b'7')
                    .contains(c)
                    .then(|| v * 8 + u16::from(c - b'0'))
            });
            // The kernel writes at most \377; anything else is taken literally.
            if let Some(byte) = value.and_then(|v| u8::try_from(v).ok()) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Unmount the file system mounted at `point` (a mount point root chose, e.g. the image
/// store's), lazily with `detach`. UMOUNT_NOFOLLOW: a symlink put in its place is not
/// followed to another mount.
pub fn unmount(point: &Path, detach: bool) -> std::io::Result<()> {
    let mut flags = rustix::mount::UnmountFlags::NOFOLLOW;
    if detach {
        flags |= rustix::mount::UnmountFlags::DETACH;
    }
    rustix::mount::unmount(point, flags).map_err(Into::into)
}

/// Lazily unmount everything at or below `dir`; returns what was unmounted.
pub fn detach_under(dir: &Path) -> Vec<PathBuf> {
    let mut done = Vec::new();
    for m in mounts_under(dir) {
        // A mount point stacked twice is listed twice; the second detach may find nothing.
        if rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH).is_ok() {
            done.push(m);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn escapes() {
        assert_eq!(
            unescape("/run/a\\040b\\134c\\011"),
            PathBuf::from("/run/a b\\c\t")
        );
        assert_eq!(unescape("/x\\04"), PathBuf::from("/x\\04"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
    }

    #[test]
    fn unescape_keeps_bytes() {
        assert_eq!(
            unescape("/mnt/datenbank-ü\\040pg"),
            std::path::Path::new("/mnt/datenbank-ü pg")
        );
        assert_eq!(unescape("/x\\377y").as_os_str().as_bytes(), b"/x\xffy");
        assert_eq!(unescape("/end\\040"), std::path::Path::new("/end "));
        // Not an escape the kernel writes: kept as it is, never a panic.
        assert_eq!(unescape("/a\\777b"), std::path::Path::new("/a\\777b"));
        assert_eq!(unescape("/a\\ü"), std::path::Path::new("/a\\ü"));
        assert_eq!(unescape("/a\\04"), std::path::Path::new("/a\\04"));
    }

    #[test]
    fn a_line_with_optional_fields() {
        let m = parse(
            b"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue\n",
        );
        assert_eq!(
            m,
            vec![Mount {
                root: PathBuf::from("/mnt1"),
                point: PathBuf::from("/mnt2"),
                options: "rw,noatime".into(),
                optional: vec!["master:1".into(), "shared:2".into()],
                fstype: "ext3".into(),
                source: "/dev/root".into(),
                super_options: "rw,errors=continue".into(),
            }]
        );
        let m = parse(b"22 1 0:20 / /dev/hugepages rw,relatime shared:1 master:2 - hugetlbfs hugetlbfs rw,pagesize=2M");
        assert_eq!(m[0].optional, ["shared:1", "master:2"]);
        assert_eq!(m[0].point, Path::new("/dev/hugepages"));
        assert_eq!(m[0].super_options, "rw,pagesize=2M");
        let m = parse(b"24 22 0:22 / /sys rw - sysfs sysfs rw\n");
        assert!(m[0].optional.is_empty());
        assert_eq!(
            (m[0].fstype.as_str(), m[0].source.as_str()),
            ("sysfs", "sysfs")
        );
    }

    #[test]
    fn mount_points_keep_non_ascii_escaped_and_non_utf8_bytes() {
        let mut text =
            b"30 1 0:30 / /mnt/datenbank-\xc3\xbc\\040pg rw - xfs /dev/vdb\\040x rw\n".to_vec();
        text.extend_from_slice(b"31 1 0:31 /sub\xff /mnt/x\xffy\\011z rw - tmpfs  rw,size=1k\n");
        let m = parse(&text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].point, Path::new("/mnt/datenbank-\u{fc} pg"));
        assert_eq!(m[0].source, "/dev/vdb x");
        assert_eq!(m[1].point.as_os_str().as_bytes(), b"/mnt/x\xffy\tz");
        assert_eq!(m[1].root.as_os_str().as_bytes(), b"/sub\xff");
        assert_eq!(m[1].source, "", "an empty source stays empty");
        assert_eq!(m[1].super_options, "rw,size=1k");
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let text: &[u8] = b"\n\
            garbage\n\
            1 2 3 4 - ext4 /dev/x rw\n\
            1 2 0:1 / /no-separator rw ext4 /dev/x rw\n\
            1 2 0:1 / /no-fstype rw - \n\
            1 2 0:1 / /no-source rw - ext4\n\
            \xff\xfe - \\\n\
            1 2 0:1 / /kept\\ rw - ext4 /dev/x\n";
        let m = parse(text);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].point, Path::new("/kept\\"));
        assert_eq!(m[0].super_options, "");
        assert!(parse(b"").is_empty());
        assert!(parse(b" - ").is_empty());
    }

    #[test]
    fn this_process_has_a_root_mount() {
        let m = read().unwrap();
        assert!(m.iter().any(|m| m.point == Path::new("/")), "{m:?}");
    }
}
