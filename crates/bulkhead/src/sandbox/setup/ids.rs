//! The IDs the command runs as: names looked up in the sandbox root's own /etc/passwd and
//! /etc/group, as systemd-nspawn --user does.

use crate::run::RunError;
use crate::sandbox::{invalid, SandboxSpec};
use bulkhead_sys::inroot::{read_in_root, InRootError};
use std::os::fd::BorrowedFd;

/// passwd and group files larger than this are refused (a real one is a few KiB).
const MAX_ID_FILE: u64 = 4 << 20;

/// The root's `etc/<name>`, read through a resolution confined to the root (an image's
/// symlinks cannot make the host read its own files, a FIFO or /dev/zero); empty when the
/// root has none.
fn read_id_file(
    root: BorrowedFd<'_>,
    shown: &std::path::Path,
    name: &str,
) -> std::result::Result<String, RunError> {
    let shown = shown.join("etc").join(name);
    let refuse = |why: String| {
        invalid(
            format!("{}: {why}", shown.display()),
            "the sandbox's root must hold a regular passwd/group file (or none): fix or remove it in the image",
        )
    };
    match read_in_root(root, &format!("etc/{name}"), MAX_ID_FILE) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(InRootError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(refuse(e.to_string())),
    }
}

/// The IDs the command runs as, from the sandbox root's own /etc/passwd and /etc/group.
#[derive(Debug, Clone)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub home: String,
    pub user: Option<String>,
}

/// Look `--uid`/`--gid` up in the root's passwd and group files, as systemd-nspawn --user
/// does: the names that matter are the sandbox's, not the host's.
pub fn resolve_ids(root: BorrowedFd<'_>, spec: &SandboxSpec) -> std::result::Result<Ids, RunError> {
    if spec.uid.is_none() && spec.gid.is_none() {
        // root: nothing to look up.
        return Ok(Ids {
            uid: 0,
            gid: 0,
            groups: vec![0],
            home: "/root".into(),
            user: Some("root".into()),
        });
    }
    let passwd = read_id_file(root, &spec.rootfs, "passwd")?;
    let group = read_id_file(root, &spec.rootfs, "group")?;
    let users: Vec<Vec<&str>> = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 7)
        .collect();
    let mut ids = Ids {
        uid: 0,
        gid: 0,
        groups: Vec::new(),
        home: "/root".into(),
        user: Some("root".into()),
    };
    if let Some(u) = &spec.uid {
        let entry = users
            .iter()
            .find(|f| f[0] == u.as_str() || f[2] == u.as_str());
        match (entry, u.parse::<u32>()) {
            (Some(f), _) => {
                ids.uid = f[2].parse().unwrap_or(0);
                ids.gid = f[3].parse().unwrap_or(0);
                ids.home = f[5].to_string();
                ids.user = Some(f[0].to_string());
            }
            (None, Ok(n)) => {
                ids.uid = n;
                ids.home = "/".into();
                ids.user = None;
                if spec.gid.is_none() {
                    return Err(invalid(
                        format!("--uid {u}: the root's /etc/passwd has no such user, so --gid is needed"),
                        "add --gid GID",
                    ));
                }
            }
            (None, Err(_)) => {
                return Err(invalid(
                    format!(
                        "--uid {u}: no such user in {}",
                        spec.rootfs.join("etc/passwd").display()
                    ),
                    "the name is looked up inside the sandbox's root; give a user it has, or a numeric UID with --gid",
                ))
            }
        }
    }
    if let Some(g) = &spec.gid {
        let entry = group
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() >= 3 && (f[0] == g.as_str() || f[2] == g.as_str()));
        ids.gid = match (entry, g.parse::<u32>()) {
            (Some(f), _) => f[2].parse().unwrap_or(0),
            (None, Ok(n)) => n,
            (None, Err(_)) => {
                return Err(invalid(
                    format!(
                        "--gid {g}: no such group in {}",
                        spec.rootfs.join("etc/group").display()
                    ),
                    "give a group the sandbox's root has, or a numeric GID",
                ))
            }
        };
    }
    ids.groups = vec![ids.gid];
    if let Some(name) = &ids.user {
        for f in group.lines().map(|l| l.split(':').collect::<Vec<_>>()) {
            if f.len() >= 4 && f[3].split(',').any(|m| m == name) {
                if let Ok(g) = f[2].parse::<u32>() {
                    if !ids.groups.contains(&g) {
                        ids.groups.push(g);
                    }
                }
            }
        }
    }
    Ok(ids)
}
