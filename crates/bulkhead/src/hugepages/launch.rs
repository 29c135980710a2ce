//! `bulkhead run --hugepages thp|2M|1G`: make an unmodified program's heap use huge pages,
//! and check that it did.
//!
//! The mechanism is the allocator's own switch, set in the environment:
//!
//! - glibc's malloc (2.35+): `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` makes it madvise its heap
//!   and mmap chunks with MADV_HUGEPAGE (THP in `madvise` mode); `=2` (default page size) or
//!   `=<bytes>` makes it mmap them with MAP_HUGETLB from the reserved pool. An existing
//!   GLIBC_TUNABLES keeps its other tunables.
//! - jemalloc (Debian's Redis links libjemalloc; Redis built from source bundles it with the
//!   `je_` prefix): `MALLOC_CONF` / `JE_MALLOC_CONF` `thp:always`, merged the same way.
//!   jemalloc cannot use hugetlb pages, so `--hugepages 2M` is refused for it.
//!
//! glibc falls back to normal pages without a word when the pool is empty, so the pool is
//! checked before the start, and by default bulkhead stays the command's parent and samples
//! `/proc/PID/smaps_rollup` of it and its children (10 ms after the start, then at doubling
//! intervals up to every 5 s) to say when the huge pages arrived, or at exit that they never
//! did. `--no-verify` execs in place instead (`hugepages usage PID` checks later).

use super::allocator::{
    detect_allocator, glibc_thp_check_flaky, glibc_version, merge_setting, Allocator,
};
use super::usage::parse_rollup;
use crate::run::{RunError, RunSpec, EXIT_RUN_FAILED};
use bulkhead_cgroups::Placement;
use bulkhead_sys::error::{Diagnostic, Error, Result, Severity};
use bulkhead_sys::fd::pipe;
use bulkhead_sys::host::hugepages::{Facts, Paths};
use bulkhead_sys::process::{self, fork_child};
use bulkhead_sys::signals::{self, Relay};
use bulkhead_sys::units::human_bytes;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What `--hugepages` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunMode {
    Thp,
    /// hugetlb pages of this size (bytes).
    Hugetlb(u64),
}

impl RunMode {
    pub fn parse(s: &str, facts: &Facts) -> Result<RunMode> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("thp") {
            return Ok(RunMode::Thp);
        }
        let Some(size) = bulkhead_sys::host::parse_page_size(t) else {
            return Err(Error::invalid(
                Diagnostic::error(format!("--hugepages {s}: not a mode")).hint(format!(
                    "write thp (transparent huge pages) or a hugetlb page size: {}",
                    facts.sizes_text()
                )),
            ));
        };
        if !facts.page_sizes.contains(&size) {
            return Err(Error::invalid(
                Diagnostic::error(format!(
                    "--hugepages {s}: this kernel has no {} huge pages",
                    human_bytes(size)
                ))
                .hint(format!(
                    "page sizes here (from /sys/kernel/mm/hugepages): {}; or thp",
                    facts.sizes_text()
                )),
            ));
        }
        Ok(RunMode::Hugetlb(size))
    }

    pub fn label(&self) -> String {
        match self {
            RunMode::Thp => "THP".into(),
            RunMode::Hugetlb(s) => format!("hugetlb {}", human_bytes(*s)),
        }
    }

    /// The value of glibc.malloc.hugetlb.
    pub fn glibc_value(&self, default_size: u64) -> String {
        match self {
            RunMode::Thp => "1".into(),
            RunMode::Hugetlb(s) if *s == default_size => "2".into(),
            RunMode::Hugetlb(s) => s.to_string(),
        }
    }
}

/// What `--hugepages` adds to a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Prepared {
    pub mode: RunMode,
    pub program: Option<PathBuf>,
    pub allocator: Allocator,
    /// Variables set (already merged with what was there).
    pub env: Vec<(String, String)>,
    pub notes: Vec<Diagnostic>,
}

/// Check that the mode can work for this program on this machine, and add the allocator
/// switches to the spec's environment. Bad input (an empty pool, THP off, jemalloc with
/// hugetlb) is refused before anything starts.
pub fn prepare(spec: &mut RunSpec, mode: RunMode, facts: &Facts) -> Result<Prepared> {
    let env = spec_env(spec)?;
    let path_var = current(&env, "PATH");
    let program = spec
        .argv
        .first()
        .and_then(|p| crate::run::find_program(p, path_var.as_deref()).ok());
    let allocator = program
        .as_deref()
        .map(detect_allocator)
        .unwrap_or(Allocator::Other("not found".into()));
    let prog_name = spec
        .argv
        .first()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut notes = Vec::new();
    check_mode(mode, facts, &allocator, &prog_name, &mut notes)?;
    check_allocator(mode, &allocator, &prog_name, &mut notes)?;
    let set = settings(mode, facts, &allocator, &env);
    if let (Allocator::Other(what), Some(_)) = (&allocator, &program) {
        notes.push(Diagnostic::warning(format!(
            "{prog_name}: {what}; GLIBC_TUNABLES reaches only programs that use glibc's malloc"
        )));
    }
    if let Some(p) = &program {
        use std::os::unix::fs::PermissionsExt;
        if std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o6000 != 0) {
            notes.push(Diagnostic::warning(format!(
                "{} is set-user/group-ID: glibc ignores GLIBC_TUNABLES for it",
                p.display()
            )));
        }
    }
    spec.env.extend(set.iter().cloned());
    Ok(Prepared {
        mode,
        program,
        allocator,
        env: set,
        notes,
    })
}

/// The variables the run will set: its env files', then its own.
fn spec_env(spec: &RunSpec) -> Result<Vec<(String, String)>> {
    let mut env: Vec<(String, String)> = Vec::new();
    for f in &spec.env_files {
        env.extend(bulkhead_plan::env::read_env_file(f)?);
    }
    env.extend(spec.env.iter().cloned());
    Ok(env)
}

/// The value the program will see for `k`: the run's last setting, else bulkhead's own.
fn current(env: &[(String, String)], k: &str) -> Option<String> {
    env.iter()
        .rev()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var(k).ok())
}

/// The machine can give this mode: THP switched on, or a hugetlb pool with free pages (and
/// an allocator that can use it).
fn check_mode(
    mode: RunMode,
    facts: &Facts,
    allocator: &Allocator,
    prog_name: &str,
    notes: &mut Vec<Diagnostic>,
) -> Result<()> {
    match mode {
        RunMode::Thp => {
            let Some(en) = &facts.thp.enabled else {
                return Err(Error::invalid(Diagnostic::error(
                    "--hugepages thp: this kernel has no transparent huge pages",
                )));
            };
            if en.active == "never" {
                return Err(Error::invalid(
                    Diagnostic::error("--hugepages thp: transparent huge pages are switched off ('never' in /sys/kernel/mm/transparent_hugepage/enabled)")
                        .hint("set thp = \"madvise\" in the plan's [hugepages] section and run bulkhead apply"),
                ));
            }
        }
        RunMode::Hugetlb(size) => {
            if let Allocator::Jemalloc(_) = allocator {
                return Err(Error::invalid(
                    Diagnostic::error(format!("--hugepages {}: {prog_name} uses jemalloc, which cannot put its heap on hugetlb pages", human_bytes(size)))
                        .hint("use --hugepages thp (bulkhead sets jemalloc's thp:always)"),
                ));
            }
            let free = facts.pool(size).map(|p| p.available()).unwrap_or(0);
            if free == 0 {
                return Err(Error::invalid(
                    Diagnostic::error(format!("--hugepages {}: the {} pool has no free pages, and glibc would silently fall back to normal pages", human_bytes(size), human_bytes(size)))
                        .hint(format!("reserve a pool: pools = {{ \"{}\" = \"1G\" }} in the plan's [hugepages] section, then bulkhead apply", human_bytes(size))),
                ));
            }
            notes.push(Diagnostic::note(format!(
                "the {} pool has {free} free page(s) ({}); glibc takes normal pages once they are gone",
                human_bytes(size),
                human_bytes(free * size)
            )));
        }
    }
    Ok(())
}

/// The allocator takes the switch: glibc new enough for its tunable (a warning where its THP
/// check is flaky); tcmalloc has none.
fn check_allocator(
    mode: RunMode,
    allocator: &Allocator,
    prog_name: &str,
    notes: &mut Vec<Diagnostic>,
) -> Result<()> {
    match allocator {
        Allocator::Glibc | Allocator::Jemalloc(_) | Allocator::Other(_) => {
            if let Some((maj, min)) = glibc_version() {
                if (maj, min) < (2, 35) && *allocator == Allocator::Glibc {
                    return Err(Error::invalid(
                        Diagnostic::error(format!("--hugepages: glibc {maj}.{min} has no glibc.malloc.hugetlb tunable (2.35 or newer has it)"))
                            .hint("the program can madvise(MADV_HUGEPAGE) itself, or set thp = \"always\" in the plan"),
                    ));
                }
                if mode == RunMode::Thp && *allocator == Allocator::Glibc && glibc_thp_check_flaky((maj, min)) {
                    notes.push(Diagnostic::warning(format!(
                        "glibc {maj}.{min} decides at each start whether THP is in madvise mode by comparing a buffer it does not terminate, so some starts get no THP; the check below says which"
                    )));
                }
            }
        }
        Allocator::Tcmalloc => notes.push(Diagnostic::warning(format!(
            "{prog_name} links tcmalloc, which has no huge page switch bulkhead knows; GLIBC_TUNABLES is set but tcmalloc ignores it"
        ))),
    }
    Ok(())
}

/// The variables that switch the allocator to huge pages, merged with their current values.
fn settings(
    mode: RunMode,
    facts: &Facts,
    allocator: &Allocator,
    env: &[(String, String)],
) -> Vec<(String, String)> {
    let mut set = vec![(
        "GLIBC_TUNABLES".to_string(),
        merge_setting(
            current(env, "GLIBC_TUNABLES").as_deref(),
            ':',
            '=',
            "glibc.malloc.hugetlb",
            &mode.glibc_value(facts.default_size),
        ),
    )];
    if let Allocator::Jemalloc(var) = allocator {
        set.push((
            var.clone(),
            merge_setting(current(env, var).as_deref(), ',', ':', "thp", "always"),
        ));
    }
    set
}

/// Huge page memory of a process tree at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Since the start.
    pub at: Duration,
    pub anonymous: u64,
    pub thp: u64,
    pub hugetlb: u64,
    pub processes: usize,
}

impl Sample {
    pub fn got(&self, mode: RunMode) -> bool {
        match mode {
            RunMode::Thp => self.thp > 0,
            RunMode::Hugetlb(_) => self.hugetlb > 0,
        }
    }
    pub fn describe(&self, mode: RunMode) -> String {
        match mode {
            RunMode::Thp => format!(
                "{} on THP ({:.0}% of {} anonymous memory)",
                human_bytes(self.thp),
                if self.anonymous > 0 {
                    self.thp as f64 * 100.0 / self.anonymous as f64
                } else {
                    0.0
                },
                human_bytes(self.anonymous)
            ),
            RunMode::Hugetlb(s) => format!(
                "{} on hugetlb {} pages (and {} of other anonymous memory)",
                human_bytes(self.hugetlb),
                human_bytes(s),
                human_bytes(self.anonymous)
            ),
        }
    }
}

/// A process and its descendants (via /proc/PID/task/TID/children).
fn tree(pid: i32) -> Vec<i32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < 4096 {
        let p = out[i];
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in rd.flatten() {
                let f = t.path().join("children");
                if let Ok(s) = std::fs::read_to_string(f) {
                    out.extend(s.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
                }
            }
        }
        i += 1;
    }
    out
}

pub fn sample(pid: i32, started: Instant) -> Option<Sample> {
    let mut s = Sample {
        at: started.elapsed(),
        ..Default::default()
    };
    for p in tree(pid) {
        let Ok(t) = std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")) else {
            continue;
        };
        let r = parse_rollup(&t);
        s.anonymous += r.anonymous;
        s.thp += r.anon_huge + r.shmem_pmd;
        s.hugetlb += r.hugetlb;
        s.processes += 1;
    }
    (s.processes > 0).then_some(s)
}

/// How a verified run ended.
#[derive(Debug)]
pub struct Verified {
    /// The exit status bulkhead should give (the command's; 128+N for signal N).
    pub code: i32,
    /// Set when the command never started (with the exit code to give).
    pub error: Option<RunError>,
    pub pid: i32,
    pub ran_for: Duration,
    /// The first sample that showed huge pages.
    pub first: Option<Sample>,
    /// The sample with the most huge page memory.
    pub peak: Option<Sample>,
    /// The last sample taken.
    pub last: Option<Sample>,
    pub samples: usize,
    /// What was asked for.
    pub mode: RunMode,
}

const FORWARDED: &[libc::c_int] = &[
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

fn encode_error(e: &RunError) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "code": e.code,
        "invalid": e.error.exit_code() == 2,
        "diagnostics": e.error.diagnostics(),
        "missing_slice": e.missing_slice,
    }))
    .unwrap_or_default()
}

fn decode_error(bytes: &[u8]) -> RunError {
    let v: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    let code = v["code"].as_i64().unwrap_or(EXIT_RUN_FAILED as i64) as i32;
    let ds: Vec<Diagnostic> = v["diagnostics"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| {
                    let s = |k: &str| d[k].as_str().map(String::from);
                    Diagnostic {
                        severity: Severity::Error,
                        location: s("location"),
                        context: s("context"),
                        message: s("message").unwrap_or_default(),
                        hint: s("hint"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let ds = if ds.is_empty() {
        vec![Diagnostic::error("the command could not be started")]
    } else {
        ds
    };
    let e = if v["invalid"].as_bool() == Some(true) {
        Error::Invalid(ds)
    } else {
        Error::Failed(Box::new(ds[0].clone()))
    };
    let mut re = RunError::with_code(code, e);
    re.missing_slice = v["missing_slice"]
        .as_str()
        .and_then(|s| bulkhead_plan::SliceName::parse(s).ok());
    re
}

/// Start the command as a child (joining the slice, dropping privileges and exec'ing exactly
/// as `run` does), stay its parent, forward SIGTERM/SIGHUP/SIGUSR1/SIGUSR2/SIGWINCH to it
/// (SIGINT and SIGQUIT from the terminal reach it directly and are ignored here), and sample
/// its huge page use until it exits. `on_first` is called once, when huge pages first show.
pub fn run_verified(
    backend: &dyn Placement,
    spec: &RunSpec,
    mode: RunMode,
    on_first: &mut dyn FnMut(i32, &Sample),
) -> Verified {
    let mut v = Verified {
        code: EXIT_RUN_FAILED,
        error: None,
        pid: 0,
        ran_for: Duration::ZERO,
        first: None,
        peak: None,
        last: None,
        samples: 0,
        mode,
    };
    let fail = |v: &mut Verified, m: String| {
        v.error = Some(RunError::with_code(EXIT_RUN_FAILED, Error::failed(m)));
        v.code = EXIT_RUN_FAILED;
    };
    let (rd, wr) = match pipe() {
        Ok(p) => p,
        Err(e) => {
            fail(&mut v, format!("pipe: {e}"));
            return v;
        }
    };
    // Forwarding is in place before the fork (exec resets the handlers in the child).
    let relay = Relay::install(FORWARDED);
    let started = Instant::now();
    let mut wr = Some(wr);
    let forked = fork_child(|| {
        let e = crate::run::exec(backend, spec);
        if let Some(w) = wr.take() {
            let _ = std::fs::File::from(w).write_all(&encode_error(&e));
        }
        e.code
    });
    drop(wr);
    let pid = match forked {
        Ok(pid) => pid,
        Err(e) => {
            fail(&mut v, format!("fork: {e}"));
            return v;
        }
    };
    v.pid = pid;
    relay.target(pid);
    let mut buf = Vec::new();
    let _ = std::fs::File::from(rd).read_to_end(&mut buf);
    if !buf.is_empty() {
        process::wait(pid, true);
        let e = decode_error(&buf);
        v.code = e.code;
        v.error = Some(e);
        return v;
    }
    // The command runs. Terminal signals reach it directly: ignore them here, as system(3).
    signals::ignore(libc::SIGINT);
    signals::ignore(libc::SIGQUIT);
    let pidfd = process::pidfd_open(pid).ok();
    let mut interval = Duration::from_millis(10);
    let mut next = started + interval;
    loop {
        let timeout = next
            .saturating_duration_since(Instant::now())
            .as_millis()
            .min(i32::MAX as u128) as i32;
        let exited = match &pidfd {
            Some(fd) => process::poll_readable(fd.as_fd(), timeout),
            None => {
                // No pidfd (Linux < 5.3): the WNOHANG check below notices the exit.
                std::thread::sleep(Duration::from_millis(timeout as u64));
                false
            }
        };
        if exited {
            break;
        }
        if Instant::now() >= next {
            take_sample(&mut v, pid, started, on_first);
            if let Some(st) = process::wait(pid, false) {
                v.code = process::exit_code(st, EXIT_RUN_FAILED);
                v.ran_for = started.elapsed();
                return v;
            }
            interval = (interval * 2).min(Duration::from_secs(5));
            next = Instant::now() + interval;
        }
    }
    let st = process::wait(pid, true).unwrap_or(0);
    v.code = process::exit_code(st, EXIT_RUN_FAILED);
    v.ran_for = started.elapsed();
    v
}

/// Look at the command's memory once; remember the first sample with huge pages (and say
/// so), the peak, and the last.
fn take_sample(
    v: &mut Verified,
    pid: i32,
    started: Instant,
    on_first: &mut dyn FnMut(i32, &Sample),
) {
    let Some(s) = sample(pid, started) else {
        return;
    };
    v.samples += 1;
    if s.got(v.mode) && v.first.is_none() {
        v.first = Some(s);
        on_first(pid, &s);
    }
    let key = |x: &Sample| x.thp + x.hugetlb;
    if v.peak.is_none_or(|p| key(&s) > key(&p)) {
        v.peak = Some(s);
    }
    v.last = Some(s);
}

/// The words for a run that never showed huge pages.
pub fn missed_reasons(v: &Verified, p: &Prepared, facts: &Facts) -> Vec<String> {
    let mut r = Vec::new();
    let pmd = facts.thp.pmd_size.unwrap_or(2 << 20);
    // What was seen decides what can be said: nothing about the allocator when it was gone
    // before the first look or too small for a huge page.
    match v.last {
        None => {
            r.push(format!(
                "it exited after {:.3} s, before the first look at its memory (10 ms)",
                v.ran_for.as_secs_f64()
            ));
            return r;
        }
        Some(s) if s.anonymous < 2 * pmd => {
            r.push(format!(
                "it had only {} of anonymous memory at the last look; malloc uses huge pages for areas of at least one huge page",
                human_bytes(s.anonymous)
            ));
            return r;
        }
        Some(_) => {}
    }
    match &p.allocator {
        Allocator::Glibc if p.mode == RunMode::Thp => {
            if let Some(v) = glibc_version().filter(|v| glibc_thp_check_flaky(*v)) {
                r.push(format!(
                    "glibc {}.{} missed THP's madvise mode at this start (its mode check compares an unterminated buffer); start it again, use --hugepages {} from a pool, or `bulkhead hugepages collapse PID`",
                    v.0,
                    v.1,
                    human_bytes(facts.default_size)
                ));
            }
        }
        Allocator::Tcmalloc => r.push("it uses tcmalloc, which ignores these switches".into()),
        Allocator::Other(w) => r.push(format!("the program is {w}")),
        _ => {}
    }
    if let RunMode::Hugetlb(size) = p.mode {
        let free = Facts::read(&Paths::default())
            .pool(size)
            .map(|x| x.available())
            .unwrap_or(0);
        r.push(format!(
            "the {} pool has {free} free page(s) now",
            human_bytes(size)
        ));
    }
    r
}

/// The argument list used in messages: `redis-server --port 6380`.
pub fn argv_text(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::super::allocator::elf_needed;
    use super::*;
    use std::path::Path;

    #[test]
    fn modes_and_allocators() {
        let facts = Facts {
            page_sizes: vec![2 << 20, 1 << 30],
            default_size: 2 << 20,
            ..Default::default()
        };
        assert_eq!(RunMode::parse("thp", &facts).unwrap(), RunMode::Thp);
        assert_eq!(
            RunMode::parse("2M", &facts).unwrap(),
            RunMode::Hugetlb(2 << 20)
        );
        assert_eq!(RunMode::Hugetlb(2 << 20).glibc_value(2 << 20), "2");
        assert_eq!(RunMode::Hugetlb(1 << 30).glibc_value(2 << 20), "1073741824");
        let e = RunMode::parse("4M", &facts).unwrap_err().to_string();
        assert!(
            e.contains("no 4M huge pages") && e.contains("2M, 1G"),
            "{e}"
        );
        assert!(RunMode::parse("huge", &facts).is_err());
        // This test binary links glibc; Debian's redis-server links libjemalloc.
        let me = std::env::current_exe().unwrap();
        assert_eq!(detect_allocator(&me), Allocator::Glibc);
        assert!(elf_needed(&std::fs::read(&me).unwrap())
            .unwrap()
            .iter()
            .any(|n| n == "libc.so.6"));
        let redis = Path::new("/usr/bin/redis-server");
        if redis.exists() {
            assert_eq!(
                detect_allocator(redis),
                Allocator::Jemalloc("MALLOC_CONF".into())
            );
        }
        assert!(glibc_version().is_some_and(|v| v >= (2, 17)));
    }

    #[test]
    fn errors_survive_the_pipe() {
        let e = RunError::with_code(
            127,
            Error::failed_with(Diagnostic::error("x: command not found").hint("check PATH")),
        );
        let back = decode_error(&encode_error(&e));
        assert_eq!(back.code, 127);
        assert_eq!(back.error.exit_code(), 1);
        assert!(back.error.to_string().contains("command not found"));
        assert!(back.error.to_string().contains("check PATH"));
        let missing = RunError::missing_slice(&bulkhead_plan::SliceName::parse("a-b").unwrap());
        let back = decode_error(&encode_error(&missing));
        assert_eq!(
            back.missing_slice.map(|s| s.to_string()),
            Some("a-b".into())
        );
    }
}
