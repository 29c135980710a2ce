//! The placement rules at work: each scan of /proc reads the processes it has not decided
//! on yet, matches them against the rules and says which to move where. A process is
//! decided on once, except a young one: PostgreSQL sets a backend's title ("postgres:
//! 15/main: backup \[local\] idle") only after the fork, and `sh -c 'pg_dump ...'` becomes
//! pg_dump only when it execs, so a process younger than `recheck` is read again on each
//! scan until it matches or grows old.
//! Bounded: at most [`MAX_WATCHED`] young processes are watched, at most [`MAX_PER_SCAN`]
//! moves are decided per scan (the rest on the next), and the table of decided PIDs holds
//! only PIDs /proc lists.

use bulkhead_plan::place::{Facts, PlaceRule};
use bulkhead_plan::SliceName;
use bulkhead_sys::procs::{self, Proc};
use std::collections::HashMap;
use std::time::Duration;

/// Young processes re-read on each scan, at most.
pub(crate) const MAX_WATCHED: usize = 4096;
/// Moves decided in one scan, at most.
pub(crate) const MAX_PER_SCAN: usize = 256;

/// A rule with its users as UIDs of this host.
pub(crate) struct Compiled {
    pub rule: PlaceRule,
    pub uids: Vec<u32>,
}

/// A process to move, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Decision {
    pub pid: i32,
    pub comm: String,
    pub cmdline: String,
    pub rule: String,
    pub slice: SliceName,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Young and unmatched: read again until it is `recheck` old.
    Watching,
    /// Matched, or old: not read again while the PID lives (start time checked).
    Done,
}

/// The scanner's memory between scans.
pub(crate) struct Engine {
    rules: Vec<Compiled>,
    seen: HashMap<i32, (u64, Seen)>,
    /// How long a new process is re-read, in clock ticks.
    recheck_ticks: u64,
    needs_parent: bool,
    me: i32,
}

impl Engine {
    pub(crate) fn new(rules: Vec<Compiled>, recheck: Duration) -> Engine {
        let ticks = (recheck.as_secs_f64() * bulkhead_sys::process::clock_ticks() as f64) as u64;
        Engine {
            needs_parent: rules.iter().any(|c| !c.rule.parent.is_empty()),
            rules,
            seen: HashMap::new(),
            recheck_ticks: ticks,
            me: std::process::id() as i32,
        }
    }

    /// One scan: the processes to move now. `now` is the clock in ticks after boot
    /// (a process's age is `now` minus its start time).
    pub(crate) fn scan(&mut self, now: u64) -> Vec<Decision> {
        let (pids, _truncated) = procs::pids();
        let live: std::collections::HashSet<i32> = pids.iter().copied().collect();
        self.seen.retain(|p, _| live.contains(p));
        let mut parents: HashMap<i32, Option<Proc>> = HashMap::new();
        let mut out = Vec::new();
        let mut watched = self
            .seen
            .values()
            .filter(|(_, s)| *s == Seen::Watching)
            .count();
        for pid in pids {
            if out.len() == MAX_PER_SCAN {
                break;
            }
            if pid <= 1 || pid == self.me {
                continue;
            }
            let before = self.seen.get(&pid).copied();
            if matches!(before, Some((_, Seen::Done))) {
                continue;
            }
            let Some(p) = procs::read(pid) else {
                // Gone, a kernel thread, or unreadable: nothing to place.
                self.seen.insert(pid, (0, Seen::Done));
                continue;
            };
            if before.is_some_and(|(start, _)| start != p.start) {
                // The PID was reused: a new process.
                self.seen.remove(&pid);
            }
            let parent = if self.needs_parent {
                parents
                    .entry(p.ppid)
                    .or_insert_with(|| procs::read(p.ppid))
                    .clone()
            } else {
                None
            };
            if let Some(d) = self.decide(&p, parent.as_ref()) {
                self.seen.insert(pid, (p.start, Seen::Done));
                out.push(d);
                continue;
            }
            let young = now.saturating_sub(p.start) < self.recheck_ticks;
            let was_watched = matches!(self.seen.get(&pid), Some((_, Seen::Watching)));
            let watch = young && (was_watched || watched < MAX_WATCHED);
            if watch && !was_watched {
                watched += 1;
            }
            if !watch && was_watched {
                watched -= 1;
            }
            let state = if watch { Seen::Watching } else { Seen::Done };
            self.seen.insert(pid, (p.start, state));
        }
        out
    }

    /// The first rule the process matches, unless it is in that rule's slice already.
    fn decide(&self, p: &Proc, parent: Option<&Proc>) -> Option<Decision> {
        let hit = first_match(&self.rules, p, parent)?;
        if in_slice(&p.cgroup, &hit.rule.slice) {
            return None;
        }
        Some(Decision {
            pid: p.pid,
            comm: p.comm.clone(),
            cmdline: p.cmdline.clone(),
            rule: hit.rule.name.clone(),
            slice: hit.rule.slice.clone(),
        })
    }
}

/// The first of `rules` the process (with its parent) matches.
pub(crate) fn first_match<'a>(
    rules: &'a [Compiled],
    p: &Proc,
    parent: Option<&Proc>,
) -> Option<&'a Compiled> {
    let unit = unit_of(&p.cgroup);
    let facts = Facts {
        uid: p.uid,
        exe: p.exe.as_deref(),
        comm: &p.comm,
        cmdline: &p.cmdline,
        parent_exe: parent.and_then(|q| q.exe.as_deref()),
        parent_comm: parent.map_or("", |q| q.comm.as_str()),
        unit: unit.as_deref(),
    };
    rules.iter().find(|c| c.rule.matches(&facts, &c.uids))
}

/// The plan's rules with their users as UIDs of this host; a user it does not know is an
/// error at the rule.
pub(crate) fn compile(plan: &bulkhead_plan::Plan) -> bulkhead_sys::error::Result<Vec<Compiled>> {
    use bulkhead_sys::error::{Diagnostic, Error};
    let mut out = Vec::new();
    for r in plan.place.values() {
        let mut uids = Vec::new();
        for u in &r.user {
            let uid = u
                .parse::<u32>()
                .ok()
                .or_else(|| bulkhead_sys::users::user_by_name(u).map(|x| x.uid));
            let Some(id) = uid else {
                return Err(Error::invalid(
                    Diagnostic::error(format!("no user '{u}' on this host"))
                        .at(plan.source.at(r.loc))
                        .context(format!("[place.{}] user", r.name))
                        .hint("name a user of /etc/passwd, or give the UID"),
                ));
            };
            uids.push(id);
        }
        out.push(Compiled {
            rule: r.clone(),
            uids,
        });
    }
    Ok(out)
}

/// Whether a /proc/PID/cgroup text puts the process in the slice (its unit is a component
/// of the path in some hierarchy: the slice itself, or a scope in it).
pub(crate) fn in_slice(proc_cgroup: &str, slice: &SliceName) -> bool {
    let unit = slice.unit();
    proc_cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|path| path.split('/').any(|c| c == unit))
}

/// The systemd unit a process runs in: the last `.service` or `.scope` of its cgroup path
/// (the name=systemd hierarchy, else the cgroup2 one).
pub(crate) fn unit_of(proc_cgroup: &str) -> Option<String> {
    let pick = |want: &dyn Fn(&str) -> bool| {
        proc_cgroup.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let _ = it.next()?;
            let ctrls = it.next()?;
            let path = it.next()?;
            want(ctrls).then(|| {
                path.split('/')
                    .rev()
                    .find(|c| c.ends_with(".service") || c.ends_with(".scope"))
                    .map(str::to_string)
            })?
        })
    };
    pick(&|c| c == "name=systemd").or_else(|| pick(&str::is_empty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_that_execs_a_matching_program_is_caught() {
        use std::process::Command;
        // A copy of sleep under a name no other program has; the shell execs it after a while.
        let dir = std::env::temp_dir().join(format!("bh-rules-exec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = format!("bh-exe-{}", std::process::id());
        let prog = dir.join(&name);
        std::fs::copy("/bin/sleep", &prog).unwrap();
        let mut e = Engine::new(
            rule(&format!(
                "[place.x]\nslice = \"db-helper\"\nexe = \"{name}\"\n"
            )),
            Duration::from_secs(30),
        );
        let mut child = Command::new("sh")
            .args(["-c", &format!("sleep 0.3; exec {} 5", prog.display())])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let now = || procs::now_ticks().unwrap();
        assert!(e.scan(now()).iter().all(|d| d.pid != pid), "still sh");
        let mut found = false;
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(50));
            if e.scan(now()).iter().any(|d| d.pid == pid && d.rule == "x") {
                found = true;
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(found, "the exec'd program was matched");
    }

    #[test]
    fn slices_and_units_from_proc_cgroup() {
        let s = SliceName::parse("db-helper").unwrap();
        assert!(in_slice("4:cpu:/db.slice/db-helper.slice\n", &s));
        assert!(in_slice("0::/db.slice/db-helper.slice/run-x.scope\n", &s));
        assert!(!in_slice("0::/db.slice/db-server.slice\n", &s));
        assert!(!in_slice("0::/db.slice/db-helper.slice-x\n", &s));
        let cg = "1:name=systemd:/system.slice/postgresql@15-main.service\n0::/x/y.scope\n";
        assert_eq!(unit_of(cg).as_deref(), Some("postgresql@15-main.service"));
        assert_eq!(
            unit_of("0::/user.slice/session-1.scope\n").as_deref(),
            Some("session-1.scope")
        );
        assert_eq!(unit_of("0::/\n"), None);
    }

    fn rule(text: &str) -> Vec<Compiled> {
        let plan = bulkhead_plan::Plan::parse(
            &format!("{}\n{text}", bulkhead_plan::EMBEDDED_DEFAULT),
            None,
        )
        .unwrap();
        plan.place
            .into_values()
            .map(|rule| Compiled { rule, uids: vec![] })
            .collect()
    }

    #[test]
    fn a_child_whose_title_changes_is_caught_and_decided_once() {
        use std::process::Command;
        // A child that renames its command line only after a while, as a PostgreSQL backend
        // does after fork: the first scan does not match it, a later one does.
        let marker = format!("bulkhead-rules-test-{}", std::process::id());
        let rules = rule(&format!(
            "[place.t]\nslice = \"db-helper\"\ncmdline = \"*{marker}*\"\n"
        ));
        let mut e = Engine::new(rules, Duration::from_secs(30));
        // The script names the marker in two pieces, so only the renamed process matches.
        let script = format!(
            "m=bulkhead-rules-; sleep 0.3; exec -a \"${{m}}test-{}\" sleep 5",
            std::process::id()
        );
        let mut child = Command::new("bash").args(["-c", &script]).spawn().unwrap();
        let pid = child.id() as i32;
        let ticks_now = || procs::now_ticks().unwrap();
        let first = e.scan(ticks_now());
        assert!(first.iter().all(|d| d.pid != pid), "{first:?}");
        let mut found = None;
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(50));
            if let Some(d) = e.scan(ticks_now()).into_iter().find(|d| d.pid == pid) {
                found = Some(d);
                break;
            }
        }
        let d = found.expect("the renamed child matched");
        assert_eq!(d.rule, "t");
        assert!(
            e.scan(ticks_now()).iter().all(|d| d.pid != pid),
            "decided once"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}
