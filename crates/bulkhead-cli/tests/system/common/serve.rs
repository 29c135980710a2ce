//! Test support for `bulkhead serve`: scratch directories, free ports, a running `serve`
//! stopped on drop, the socket's status file, and clients that pick their source address.

use super::rootfs::busybox_root;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static N: AtomicUsize = AtomicUsize::new(0);
pub const PY: &str = "/usr/bin/python3";

/// Whether a program the test needs is there (in CI its absence fails the test).
pub fn have(path: &str, package: &str) -> bool {
    Path::new(path).exists()
        || bulkhead_testkit::prereq::missing(&format!("{path} is missing (apt install {package})"))
}

pub fn python_ok() -> bool {
    have(PY, "python3")
}

/// A scratch directory (plan, busybox root, scripts), removed on drop.
pub struct Scratch {
    pub dir: PathBuf,
    pub tag: String,
}

impl Scratch {
    /// `/var/tmp/bulkhead-PREFIX-TAG`, made by root with mode 0755.
    pub fn new(prefix: &str) -> Scratch {
        let tag = format!(
            "t{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let dir = PathBuf::from(format!("/var/tmp/bulkhead-{prefix}-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch { dir, tag }
    }
    /// A unique socket name.
    pub fn name(&self, base: &str) -> String {
        format!("{base}-{}", self.tag)
    }
    /// A busybox root with /www/index.html.
    pub fn root(&self) -> PathBuf {
        let r = self.dir.join("root");
        if !r.exists() {
            busybox_root(&r);
            std::fs::create_dir_all(r.join("www")).unwrap();
            std::fs::write(r.join("www/index.html"), "hello from the sandbox\n").unwrap();
        }
        r
    }
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn bulkhead() -> Command {
    let mut c = bulkhead_testkit::bins::bulkhead_cmd();
    c.env_remove("NOTIFY_SOCKET");
    c
}

/// `bulkhead -c PLAN serve`.
pub fn serve_cmd(plan: &Path) -> Command {
    let mut c = bulkhead();
    c.arg("-c").arg(plan).arg("serve");
    c
}

/// A running `bulkhead serve`, stopped with SIGTERM on drop (SIGKILL if it hangs).
pub struct Serve {
    pub child: Child,
    pub log: PathBuf,
}

impl Serve {
    pub fn start(plan: &Path, log: PathBuf) -> Serve {
        Serve::start_cmd(serve_cmd(plan), log)
    }
    /// Start `cmd` (a `serve`, maybe behind a wrapper that execs it) and wait until it
    /// listens.
    pub fn start_cmd(cmd: Command, log: PathBuf) -> Serve {
        let s = Serve::spawn(cmd, log);
        let t0 = Instant::now();
        while !s.log().contains("listening on") {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "serve did not start:\n{}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        s
    }
    /// Start `cmd` without waiting.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Serve {
        let child = cmd
            .stderr(std::fs::File::create(&log).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Serve { child, log }
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// SIGTERM and wait; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        if let Ok(Some(st)) = self.child.try_wait() {
            return st.code();
        }
        let _ = bulkhead::sys::process::kill(self.child.id() as i32, libc::SIGTERM);
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("serve did not stop within 30 s:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// The socket's status file, as `bulkhead status --json` reads it.
pub fn status(name: &str) -> serde_json::Value {
    let p = format!("/run/bulkhead/sockets/{name}.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// [`status`] for a wait: `null` while `serve` has not written the file yet (it writes it on
/// a state change and once a second).
pub fn status_once_written(name: &str) -> serde_json::Value {
    let p = format!("/run/bulkhead/sockets/{name}.json");
    std::fs::read_to_string(&p)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Wait until `f` holds, polling every 20 ms, for at most a minute (the system tests' one
/// wait for a condition: a busy host, thousands of processes beside the test, only makes it
/// take longer; never a fixed pause).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP connection to 127.0.0.1:`port` from the source address `from` (127.0.0.0/8 is all
/// loopback, so each 127.x.y.z is another client to `serve`).
pub fn connect_from(from: [u8; 4], port: u16) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.bind(&SocketAddr::from((from, 0)).into())?;
    s.connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)).into(),
        Duration::from_secs(5),
    )?;
    Ok(s.into())
}

/// Raise this test process's soft RLIMIT_NOFILE to at least `n` (it opens many sockets).
/// Returns false (a missing prerequisite) when the hard limit is lower.
pub fn want_fds(n: u64) -> bool {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft >= n {
        return true;
    }
    if hard < n {
        return bulkhead_testkit::prereq::missing(&format!(
            "RLIMIT_NOFILE hard limit {hard} < {n}"
        ));
    }
    setrlimit(Resource::RLIMIT_NOFILE, n, hard).unwrap();
    true
}

/// CPU time (user + system) a process used so far.
pub fn cpu_time(pid: u32) -> Duration {
    bulkhead::sys::process::cpu_time(pid).expect("the process is gone")
}

/// A command run as the unprivileged user nobody (UID and GID 65534, no groups).
pub fn as_nobody(prog: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--",
        prog,
    ]);
    c
}
