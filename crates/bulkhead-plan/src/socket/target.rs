//! `[socket.NAME.target]`: the command behind a socket, plain or in a sandbox.

use super::{TargetSpec, SANDBOX_TARGET_KEYS, TARGET_KEYS};
use crate::values::Ctx;
use crate::{Loc, SliceName};
use std::collections::HashMap;
use std::path::PathBuf;
use toml::de::DeValue;

pub(super) fn parse(c: &mut Ctx<'_>, loc: Loc, v: &DeValue<'_>) -> Option<TargetSpec> {
    let Some(table) = v.as_table() else {
        c.err(
            loc,
            "target",
            "target must be a table".into(),
            "write [socket.NAME.target] followed by command = [...]",
        );
        return None;
    };
    let before = c.errors.len();
    let mut t = empty(loc);
    let mut seen = HashMap::new();
    for (k, v) in table.iter() {
        let key = k.get_ref().as_ref();
        let kloc = c.source.loc(k.span().start);
        seen.insert(key.to_string(), kloc);
        set(c, &mut t, key, kloc, v.get_ref());
    }
    if t.boot {
        booted(c, &seen);
    } else {
        check_command(c, &t, &seen, loc);
    }
    if t.rootfs.is_none() {
        sandbox_only(c, &seen);
    }
    if c.errors.len() > before {
        None
    } else {
        Some(t)
    }
}

fn empty(loc: Loc) -> TargetSpec {
    TargetSpec {
        command: Vec::new(),
        rootfs: None,
        slice: None,
        user: None,
        group: None,
        working_directory: None,
        environment: Vec::new(),
        network: None,
        bind: Vec::new(),
        snapshot: None,
        private_users: None,
        tmp_size: None,
        shm_size: None,
        overlay_size: None,
        boot: false,
        loc,
        slice_at: None,
    }
}

/// One key of the target's table.
fn set(c: &mut Ctx<'_>, t: &mut TargetSpec, key: &str, kloc: Loc, val: &DeValue<'_>) {
    let tkey = format!("target.{key}");
    match key {
        "command" => {
            if let Some(cmd) = c.strings(kloc, &tkey, val) {
                t.command = cmd
            }
        }
        "rootfs" => t.rootfs = c.string(kloc, &tkey, val),
        "slice" => {
            t.slice_at = Some(kloc);
            if let Some(s) = c.string(kloc, &tkey, val) {
                match SliceName::parse(&s) {
                    Ok(n) => t.slice = Some(n),
                    Err(m) => c.err(kloc, &tkey, format!("invalid slice name: {m}"), ""),
                }
            }
        }
        "user" => t.user = c.string(kloc, &tkey, val),
        "group" => t.group = c.string(kloc, &tkey, val),
        "working_directory" => {
            if let Some(s) = c.string(kloc, &tkey, val) {
                if s.starts_with('/') {
                    t.working_directory = Some(PathBuf::from(s))
                } else {
                    c.err(kloc, &tkey, format!("'{s}' is not an absolute path"), "")
                }
            }
        }
        "environment" => environment(c, t, kloc, &tkey, val),
        "network" | "bind" | "snapshot" | "private_users" => sandbox(c, t, key, kloc, &tkey, val),
        "boot" => match val {
            DeValue::Boolean(b) => t.boot = *b,
            _ => c.err(
                kloc,
                &tkey,
                "boot must be true or false".into(),
                "write boot = true to boot the root's init (spawn --boot)",
            ),
        },
        "tmp_size" | "shm_size" | "overlay_size" => {
            let text = match val {
                DeValue::String(s) => Some(s.to_string()),
                DeValue::Integer(i) => Some(i.as_str().to_string()),
                _ => None,
            };
            match text.map(|s| crate::sandbox::parse_tmpfs_size(&s)) {
                Some(Ok(n)) => match key {
                    "tmp_size" => t.tmp_size = Some(n),
                    "shm_size" => t.shm_size = Some(n),
                    _ => t.overlay_size = Some(n),
                },
                Some(Err(m)) => c.err(kloc, &tkey, m, "write a size such as \"64M\" or \"1G\""),
                None => c.err(
                    kloc,
                    &tkey,
                    format!("{key} must be a size"),
                    "write a size such as \"64M\" or \"1G\"",
                ),
            }
        }
        other => {
            let hint = match crate::directives::suggest(other, TARGET_KEYS) {
                Some(s) => format!("did you mean {s}?"),
                None => format!("a target takes: {}", TARGET_KEYS.join(", ")),
            };
            c.err(
                kloc,
                &format!("target.{other}"),
                format!("unknown key '{other}'"),
                &hint,
            );
        }
    }
}

/// `environment = { K = "v" }` or `["K=v", ...]`.
fn environment(c: &mut Ctx<'_>, t: &mut TargetSpec, kloc: Loc, tkey: &str, val: &DeValue<'_>) {
    match val {
        DeValue::Table(env) => {
            for (ek, ev) in env.iter() {
                if let Some(s) = c.string(kloc, tkey, ev.get_ref()) {
                    t.environment.push((ek.get_ref().to_string(), s));
                }
            }
        }
        _ => {
            for s in c.strings(kloc, tkey, val).unwrap_or_default() {
                match crate::env::parse_env_assignment(&s) {
                    Ok(kv) => t.environment.push(kv),
                    Err(m) => c.err(kloc, tkey, m, "write KEY=VALUE"),
                }
            }
        }
    }
}

/// The keys only a sandboxed target takes (checked as `spawn` checks its options).
fn sandbox(
    c: &mut Ctx<'_>,
    t: &mut TargetSpec,
    key: &str,
    kloc: Loc,
    tkey: &str,
    val: &DeValue<'_>,
) {
    match key {
        "network" => match c.string(kloc, tkey, val) {
            Some(n) if n.parse::<crate::sandbox::Net>().is_ok() => t.network = Some(n),
            Some(n) => c.err(
                kloc,
                tkey,
                format!("'{n}' is not a network mode"),
                "use none, private or host",
            ),
            None => {}
        },
        "bind" => {
            for s in c.strings(kloc, tkey, val).unwrap_or_default() {
                match s.parse::<crate::sandbox::Bind>() {
                    Ok(_) => t.bind.push(s),
                    Err(m) => c.err(kloc, tkey, m, ""),
                }
            }
        }
        "snapshot" => match c.string(kloc, tkey, val) {
            Some(s) if s.parse::<crate::sandbox::Choice>().is_ok() => t.snapshot = Some(s),
            Some(s) => c.err(
                kloc,
                tkey,
                format!("'{s}' is not a snapshot method"),
                "use auto, btrfs, reflink, overlay or copy",
            ),
            None => {}
        },
        _ => {
            // true means auto, as systemd-nspawn's PrivateUsers=yes picks a range.
            let text = match val {
                DeValue::Boolean(true) => Some("auto".to_string()),
                DeValue::Boolean(false) => None,
                _ => c.string(kloc, tkey, val),
            };
            if let Some(s) = text {
                match crate::sandbox::parse_private_users(&s) {
                    Ok(_) => t.private_users = Some(s),
                    Err((msg, hint)) => c.err(kloc, tkey, msg, hint),
                }
            }
        }
    }
}

/// A command is given and its program is not empty.
fn check_command(c: &mut Ctx<'_>, t: &TargetSpec, seen: &HashMap<String, Loc>, loc: Loc) {
    if t.command.is_empty() && !seen.contains_key("command") {
        c.err(
            loc,
            "target.command",
            "a target needs a command".into(),
            "add command = [\"/usr/bin/server\", \"--port\", \"8000\"]",
        );
    } else if t.command.first().is_some_and(|p| p.is_empty()) || t.command.is_empty() {
        c.err(
            seen["command"],
            "target.command",
            "the command is empty".into(),
            "",
        );
    }
}

/// A booted target: its init runs as root with the container's own settings, so the keys
/// that choose a user or a directory for a command do not apply; `command` holds the init's
/// arguments and may be empty.
fn booted(c: &mut Ctx<'_>, seen: &HashMap<String, Loc>) {
    for k in ["user", "group", "working_directory"] {
        if let Some(l) = seen.get(k) {
            c.err(
                *l,
                &format!("target.{k}"),
                format!("{k} does not apply to a booted target: its init runs as root and starts the services, each as the user its unit names"),
                "remove it (set User= in the unit inside the root), or boot = false to run one command",
            );
        }
    }
}

/// A plain target given a sandbox's key.
fn sandbox_only(c: &mut Ctx<'_>, seen: &HashMap<String, Loc>) {
    for &k in SANDBOX_TARGET_KEYS {
        if let Some(l) = seen.get(k) {
            c.err(
                *l,
                &format!("target.{k}"),
                format!("{k} only applies to a sandboxed target"),
                "add rootfs = \"...\" to run the target in an ephemeral sandbox, or remove it",
            );
        }
    }
}
