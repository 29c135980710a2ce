//! Users and groups from the system's databases (getpwnam(3), getgrnam(3), getgrouplist(3):
//! /etc/passwd and /etc/group, or whatever NSS is configured with).

/// A user entry, as far as bulkhead needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    /// The user's primary group.
    pub gid: u32,
}

fn from_nix(u: nix::unistd::User) -> User {
    User {
        name: u.name,
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
    }
}

/// The user with this UID; None when it has no entry (or the lookup failed).
pub fn user_by_uid(uid: u32) -> Option<User> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(from_nix)
}

/// The user with this name; None when there is none (or the lookup failed).
pub fn user_by_name(name: &str) -> Option<User> {
    nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .map(from_nix)
}

/// The GID of the group with this name; None when there is none (or the lookup failed).
pub fn gid_by_name(name: &str) -> Option<u32> {
    nix::unistd::Group::from_name(name)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
}

/// The user's groups as a login gives them (getgrouplist: `gid` and every group that lists
/// the user); `[gid]` alone when they cannot be read.
pub fn group_list(user: &str, gid: u32) -> Vec<u32> {
    let Ok(name) = std::ffi::CString::new(user) else {
        return vec![gid];
    };
    nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid))
        .map(|gs| gs.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_else(|_| vec![gid])
}

/// The first UID of ordinary users (`UID_MIN` of /etc/login.defs, 1000 by default): below it
/// are root and the system users services run as (postgres, redis).
pub fn uid_min() -> u32 {
    std::fs::read_to_string("/etc/login.defs")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("UID_MIN")).then(|| w.next()?.parse().ok())?
            })
        })
        .unwrap_or(1000)
}

/// Whether a UID is root's or a system user's (below [`uid_min`]; 65534, nobody, is not).
pub fn is_system_uid(uid: u32) -> bool {
    uid < uid_min() && uid != 65534
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_users() {
        assert!(is_system_uid(0));
        assert!(!is_system_uid(65534));
        assert!(!is_system_uid(uid_min()));
    }

    #[test]
    fn root_is_uid_0_with_its_group() {
        let root = user_by_uid(0).expect("every host has root");
        assert_eq!(root.uid, 0);
        assert_eq!(user_by_name(&root.name), Some(root.clone()));
        assert!(group_list(&root.name, root.gid).contains(&root.gid));
        assert_eq!(gid_by_name("root"), Some(0));
        assert!(user_by_name("no-such-user-bulkhead").is_none());
    }
}
