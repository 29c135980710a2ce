//! The placement rules at work: the processes to decide on are read from /proc, matched
//! against the rules, and the engine says which to move where. Two ways name them: a scan
//! of /proc ([`Engine::scan`]: every process not decided on yet) and the kernel's process
//! events ([`Engine::decide_on`]: the processes that forked, exec'd, or changed their user
//! or command name, as [`change_of`] reads an event). A process is decided on once, except
//! a young one: PostgreSQL sets a backend's title ("postgres: 15/main: backup \[local\]
//! idle") only after the fork, with no event, and `sh -c 'pg_dump ...'` becomes pg_dump
//! only when it execs, so a process younger than `recheck` is read again on each scan or
//! re-check ([`Engine::recheck`]) until it matches or grows old.
//! Bounded: at most [`MAX_WATCHED`] young processes are watched, at most [`MAX_PER_SCAN`]
//! moves are decided per scan or re-check (the rest on the next), and the table of decided
//! PIDs holds only PIDs /proc listed at the last scan or an event named since.

use super::identity::{in_slice, program_on_host, unit_of};
use bulkhead_plan::place::{Facts, OnHost, PlaceRule};
use bulkhead_plan::SliceName;
use bulkhead_sys::procevents::Event;
use bulkhead_sys::procs::{self, Proc};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// Young processes re-read on each scan, at most.
pub(crate) const MAX_WATCHED: usize = 4096;
/// Moves decided in one scan, at most.
pub(crate) const MAX_PER_SCAN: usize = 256;

/// A rule with its names resolved on this host: its users' UIDs, its literal executable
/// paths as the files they name.
pub(crate) struct Compiled {
    pub rule: PlaceRule,
    pub on_host: OnHost,
}

/// A process to move, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Decision {
    pub pid: i32,
    /// Its start time: with the PID, the process the rule matched (and no other).
    #[serde(skip)]
    pub start: u64,
    pub comm: String,
    pub cmdline: String,
    pub rule: String,
    pub slice: SliceName,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Young and unmatched: read again until it is `recheck` old.
    Watching,
    /// Unmatched and old, or nothing to place (a kernel thread, unreadable): a scan does not
    /// read it again; an event that it changed (exec, user, name) does.
    Old,
    /// Matched: not decided on again while the PID lives (start time checked).
    Decided,
}

/// What a process event means to the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// The process is new or may match differently now (fork, exec, user, name): read it.
    Read(i32),
    /// The process exited: forget it.
    Gone(i32),
}

/// What `e` means to the rules; None for what they cannot see (a thread's own fork, name
/// or exit, GIDs, sessions, the kernel's answers).
pub(crate) fn change_of(e: &Event) -> Option<Change> {
    match *e {
        Event::Fork {
            child_pid,
            child_tgid,
            ..
        } if child_pid == child_tgid => Some(Change::Read(child_tgid)),
        Event::Exec { tgid, .. } | Event::Uid { tgid, .. } => Some(Change::Read(tgid)),
        Event::Comm { pid, tgid, .. } if pid == tgid => Some(Change::Read(tgid)),
        Event::Exit { pid, tgid, .. } if pid == tgid => Some(Change::Gone(tgid)),
        _ => None,
    }
}

/// The rules' memory between scans and events.
pub(crate) struct Engine {
    rules: Vec<Compiled>,
    seen: HashMap<i32, (u64, Seen)>,
    /// The PIDs `seen` says are [`Seen::Watching`].
    watching: BTreeSet<i32>,
    /// How long a new process is re-read, in clock ticks.
    recheck_ticks: u64,
    needs_parent: bool,
    me: i32,
}

/// Parents read in one pass, by PID.
type Parents = HashMap<i32, Option<Proc>>;

impl Engine {
    pub(crate) fn new(rules: Vec<Compiled>, recheck: Duration) -> Engine {
        let ticks = (recheck.as_secs_f64() * bulkhead_sys::process::clock_ticks() as f64) as u64;
        Engine {
            needs_parent: rules.iter().any(|c| !c.rule.parent.is_empty()),
            rules,
            seen: HashMap::new(),
            watching: BTreeSet::new(),
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
        self.watching.retain(|p| live.contains(p));
        let mut parents = Parents::new();
        let mut out = Vec::new();
        for pid in pids {
            if out.len() == MAX_PER_SCAN {
                break;
            }
            if !self.placeable(pid) {
                continue;
            }
            let before = self.seen.get(&pid).copied();
            if matches!(before, Some((_, Seen::Old | Seen::Decided))) {
                continue;
            }
            let Some(p) = procs::read(pid) else {
                // Gone, a kernel thread, or unreadable: nothing to place.
                self.set(pid, 0, Seen::Old);
                continue;
            };
            if before.is_some_and(|(start, _)| start != p.start) {
                // The PID was reused: a new process.
                self.forget(pid);
            }
            out.extend(self.consider(&p, now, &mut parents));
        }
        out
    }

    /// Decide on these processes (those the kernel's events named; the caller gives at most
    /// [`MAX_PER_SCAN`]): each is read again unless it was decided on already (its start
    /// time checked: a reused PID is a new process), so one that exec'd or changed its
    /// user or name is judged as it is now.
    pub(crate) fn decide_on(&mut self, now: u64, pids: &[i32]) -> Vec<Decision> {
        self.decide_each(now, pids, usize::MAX)
    }

    /// Read the young processes being watched again (their command line may have changed
    /// without an event): at most [`MAX_PER_SCAN`] moves, the rest on the next re-check.
    pub(crate) fn recheck(&mut self, now: u64) -> Vec<Decision> {
        let pids: Vec<i32> = self.watching.iter().copied().collect();
        self.decide_each(now, &pids, MAX_PER_SCAN)
    }

    /// [`Engine::decide_on`], stopping at `limit` decisions.
    fn decide_each(&mut self, now: u64, pids: &[i32], limit: usize) -> Vec<Decision> {
        let mut parents = Parents::new();
        let mut out = Vec::new();
        for &pid in pids {
            if out.len() >= limit {
                break;
            }
            if !self.placeable(pid) {
                continue;
            }
            let Some(p) = procs::read(pid) else {
                self.forget(pid);
                continue;
            };
            match self.seen.get(&pid).copied() {
                Some((start, Seen::Decided)) if start == p.start => continue,
                Some((start, _)) if start != p.start => self.forget(pid),
                _ => {}
            }
            out.extend(self.consider(&p, now, &mut parents));
        }
        out
    }

    /// The process exited: its entry goes (a later process with its PID starts afresh).
    pub(crate) fn forget(&mut self, pid: i32) {
        self.seen.remove(&pid);
        self.watching.remove(&pid);
    }

    /// How many young processes are being watched.
    pub(crate) fn watched(&self) -> usize {
        self.watching.len()
    }

    fn placeable(&self, pid: i32) -> bool {
        pid > 1 && pid != self.me
    }

    fn set(&mut self, pid: i32, start: u64, s: Seen) {
        self.seen.insert(pid, (start, s));
        if s == Seen::Watching {
            self.watching.insert(pid);
        } else {
            self.watching.remove(&pid);
        }
    }

    /// Match one process just read: a decision, or watch it while it is young (and there
    /// is room), else leave it as old.
    fn consider(&mut self, p: &Proc, now: u64, parents: &mut Parents) -> Option<Decision> {
        let parent = if self.needs_parent {
            parents
                .entry(p.ppid)
                .or_insert_with(|| procs::read(p.ppid))
                .clone()
        } else {
            None
        };
        if let Some(d) = self.decide(p, parent.as_ref()) {
            self.set(p.pid, p.start, Seen::Decided);
            return Some(d);
        }
        let young = now.saturating_sub(p.start) < self.recheck_ticks;
        let room = self.watching.contains(&p.pid) || self.watching.len() < MAX_WATCHED;
        let state = if young && room {
            Seen::Watching
        } else {
            Seen::Old
        };
        self.set(p.pid, p.start, state);
        None
    }

    /// The first rule the process matches, unless it is in that rule's slice already.
    fn decide(&self, p: &Proc, parent: Option<&Proc>) -> Option<Decision> {
        let hit = first_match(&self.rules, p, parent)?;
        if in_slice(&p.cgroup, &hit.rule.slice) {
            return None;
        }
        Some(Decision {
            pid: p.pid,
            start: p.start,
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
        exe_id: p.exe_id,
        comm: &p.comm,
        cmdline: &p.cmdline,
        parent_exe: parent.and_then(|q| q.exe.as_deref()),
        parent_exe_id: parent.and_then(|q| q.exe_id),
        parent_comm: parent.map_or("", |q| q.comm.as_str()),
        unit: unit.as_deref(),
    };
    rules.iter().find(|c| c.rule.matches_on(&facts, &c.on_host))
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
            on_host: OnHost {
                uids,
                exe: r.exe.iter().map(|p| program_on_host(p)).collect(),
                parent: r.parent.iter().map(|p| program_on_host(p)).collect(),
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that waits for the test's word on its stdin before it goes on: the test
    /// scans while the child is surely still what it started as, however long the scan takes
    /// (6,000 processes on the host), then lets it go.
    struct Held {
        child: std::process::Child,
    }

    impl Held {
        fn spawn(shell: &str, script: &str) -> Held {
            use std::process::{Command, Stdio};
            let child = Command::new(shell)
                .args(["-c", &format!("read _; {script}")])
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            Held { child }
        }
        fn pid(&self) -> i32 {
            self.child.id() as i32
        }
        fn release(&mut self) {
            use std::io::Write;
            let mut stdin = self.child.stdin.take().unwrap();
            stdin.write_all(b"go\n").unwrap();
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Scans until one decides on `pid`, for at most 30 s (a condition with a deadline, not
    /// a fixed pause: a loaded host only makes it take longer).
    fn scan_until(e: &mut Engine, pid: i32) -> Option<Decision> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let now = procs::now_ticks().unwrap();
            if let Some(d) = e.scan(now).into_iter().find(|d| d.pid == pid) {
                return Some(d);
            }
            std::thread::yield_now();
        }
        None
    }

    #[test]
    fn a_shell_that_execs_a_matching_program_is_caught() {
        // A copy of sleep under a name no other program has; the shell execs it when told.
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
        let mut child = Held::spawn("sh", &format!("exec {} 30", prog.display()));
        let pid = child.pid();
        let now = procs::now_ticks().unwrap();
        assert!(e.scan(now).iter().all(|d| d.pid != pid), "still sh");
        child.release();
        let found = scan_until(&mut e, pid);
        drop(child);
        std::fs::remove_dir_all(&dir).unwrap();
        let d = found.expect("the exec'd program was matched");
        assert_eq!(d.rule, "x");
    }

    fn rule(text: &str) -> Vec<Compiled> {
        let plan = bulkhead_plan::Plan::parse(
            &format!("{}\n{text}", bulkhead_plan::EMBEDDED_DEFAULT),
            None,
        )
        .unwrap();
        plan.place
            .into_values()
            .map(|rule| Compiled {
                rule,
                on_host: OnHost::default(),
            })
            .collect()
    }

    #[test]
    fn a_child_whose_title_changes_is_caught_and_decided_once() {
        // A child that renames its command line only when told, as a PostgreSQL backend does
        // after fork: the first scan does not match it, a later one does.
        let marker = format!("bulkhead-rules-test-{}", std::process::id());
        let rules = rule(&format!(
            "[place.t]\nslice = \"db-helper\"\ncmdline = \"*{marker}*\"\n"
        ));
        let mut e = Engine::new(rules, Duration::from_secs(30));
        // The script names the marker in two pieces, so only the renamed process matches.
        let script = format!(
            "m=bulkhead-rules-; exec -a \"${{m}}test-{}\" sleep 30",
            std::process::id()
        );
        let mut child = Held::spawn("bash", &script);
        let pid = child.pid();
        let first = e.scan(procs::now_ticks().unwrap());
        assert!(first.iter().all(|d| d.pid != pid), "{first:?}");
        child.release();
        let d = scan_until(&mut e, pid).expect("the renamed child matched");
        assert_eq!(d.rule, "t");
        assert!(
            e.scan(procs::now_ticks().unwrap())
                .iter()
                .all(|d| d.pid != pid),
            "decided once"
        );
    }

    /// `sleep 30` whose command line is `MARKER 30` from its start, with the rules that
    /// match it.
    fn marked(tag: &str) -> (Engine, std::process::Child) {
        use std::os::unix::process::CommandExt;
        let marker = format!("bh-rules-{tag}-{}", std::process::id());
        let rules = rule(&format!(
            "[place.m]\nslice = \"db-helper\"\ncmdline = \"{marker} *\"\n"
        ));
        let child = std::process::Command::new("sleep")
            .arg0(&marker)
            .arg("30")
            .spawn()
            .unwrap();
        // spawn returns when the child leaves the parent's memory (vfork), before the new
        // program's command line is set: wait for it (with a deadline).
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !procs::read(pid).is_some_and(|p| p.cmdline.starts_with(&marker)) {
            assert!(
                std::time::Instant::now() < deadline,
                "{marker} never showed"
            );
            std::thread::yield_now();
        }
        (Engine::new(rules, Duration::from_secs(30)), child)
    }

    fn end(mut child: std::process::Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn an_engine_fed_pids_decides_once() {
        let (mut e, child) = marked("once");
        let pid = child.id() as i32;
        let now = procs::now_ticks().unwrap();
        let first = e.decide_on(now, &[pid, pid]);
        let again = e.decide_on(now, &[pid]);
        end(child);
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!((first[0].pid, first[0].rule.as_str()), (pid, "m"));
        assert!(again.is_empty(), "decided once: {again:?}");
    }

    #[test]
    fn a_reused_pid_or_a_changed_old_process_is_read_again() {
        let (mut e, child) = marked("reuse");
        let pid = child.id() as i32;
        let start = procs::read(pid).unwrap().start;
        let now = procs::now_ticks().unwrap();
        // Another process had this PID and was decided on: this one is new.
        e.seen.insert(pid, (start.wrapping_sub(1), Seen::Decided));
        let reused = e.decide_on(now, &[pid]);
        // An old process left unmatched: a scan skips it, an event (its exec) reads it.
        e.forget(pid);
        e.seen.insert(pid, (start, Seen::Old));
        let scanned = e.scan(now);
        let evented = e.decide_on(now, &[pid]);
        end(child);
        assert_eq!(reused.len(), 1, "{reused:?}");
        assert!(scanned.iter().all(|d| d.pid != pid), "{scanned:?}");
        assert_eq!(evented.len(), 1, "{evented:?}");
    }

    #[test]
    fn a_young_child_named_by_an_event_is_rechecked_until_its_title_matches() {
        let marker = format!("bulkhead-rules-event-{}", std::process::id());
        let rules = rule(&format!(
            "[place.t]\nslice = \"db-helper\"\ncmdline = \"*{marker}*\"\n"
        ));
        let mut e = Engine::new(rules, Duration::from_secs(30));
        let script = format!(
            "m=bulkhead-rules-; exec -a \"${{m}}event-{}\" sleep 30",
            std::process::id()
        );
        let mut child = Held::spawn("bash", &script);
        let pid = child.pid();
        // Its fork: read, no match yet, young: watched.
        assert!(e.decide_on(procs::now_ticks().unwrap(), &[pid]).is_empty());
        assert_eq!(e.watched(), 1);
        child.release();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut found = None;
        while found.is_none() && std::time::Instant::now() < deadline {
            let now = procs::now_ticks().unwrap();
            found = e.recheck(now).into_iter().find(|d| d.pid == pid);
            std::thread::yield_now();
        }
        assert_eq!(found.expect("the renamed child matched").rule, "t");
        assert_eq!(e.watched(), 0, "decided: no longer watched");
    }

    #[test]
    fn events_the_rules_care_about() {
        let fork = |child_pid, child_tgid| Event::Fork {
            parent_pid: 1,
            parent_tgid: 1,
            child_pid,
            child_tgid,
        };
        assert_eq!(change_of(&fork(10, 10)), Some(Change::Read(10)));
        assert_eq!(change_of(&fork(11, 10)), None, "a thread");
        assert_eq!(
            change_of(&Event::Exec { pid: 12, tgid: 12 }),
            Some(Change::Read(12))
        );
        let uid = Event::Uid {
            pid: 14,
            tgid: 13,
            ruid: 105,
            euid: 105,
        };
        assert_eq!(change_of(&uid), Some(Change::Read(13)));
        let comm = |pid| Event::Comm {
            pid,
            tgid: 15,
            comm: [0; 16],
        };
        assert_eq!(change_of(&comm(15)), Some(Change::Read(15)));
        assert_eq!(change_of(&comm(16)), None, "a thread's name");
        let exit = |pid| Event::Exit {
            pid,
            tgid: 17,
            code: 0,
            signal: 17,
        };
        assert_eq!(change_of(&exit(17)), Some(Change::Gone(17)));
        assert_eq!(change_of(&exit(18)), None, "a thread ended");
        assert_eq!(change_of(&Event::Sid { pid: 1, tgid: 1 }), None);
        assert_eq!(change_of(&Event::Ack { ack: 1, err: 0 }), None);
    }
}
