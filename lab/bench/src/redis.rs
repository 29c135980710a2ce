//! A real Redis server for the benchmarks, started inside a slice and always stopped.

use crate::child::Server;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub struct Redis {
    server: Server,
    pub addr: SocketAddr,
    pub pid: u32,
}

/// Where Debian (and most distributions) install it.
pub fn find_server() -> Option<PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/bin", "/usr/sbin", "/usr/local/bin"])
        .map(|d| Path::new(d).join("redis-server"))
        .find(|p| p.is_file())
}

/// A free TCP port on 127.0.0.1 (below the ephemeral range: bulkhead's `sys::net`).
pub fn free_port() -> Result<u16, String> {
    bulkhead_sys::net::free_port().ok_or_else(|| "no free port between 20000 and 32000".into())
}

/// Whether something already listens on the port.
pub fn port_busy(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_err()
}

pub struct Options<'a> {
    pub port: u16,
    pub dir: &'a Path,
    /// Append-only file with an fsync after every write (for the I/O scenario).
    pub aof_always: bool,
    /// cgroup.procs files of the slice the server starts in.
    pub procs_files: &'a [PathBuf],
}

impl Redis {
    pub fn start(o: &Options) -> Result<Redis, String> {
        Redis::start_wrapped(o, &[])
    }

    /// Start it through a wrapper (`bulkhead run --hugepages thp --no-verify --`): the wrapper
    /// must exec the server in place, so the PID stays the server's.
    pub fn start_wrapped(o: &Options, wrapper: &[std::ffi::OsString]) -> Result<Redis, String> {
        let server = find_server()
            .ok_or("redis-server is not installed (Debian: apt-get install redis-server)")?;
        if port_busy(o.port) {
            return Err(format!(
                "port {} on 127.0.0.1 is busy; pick another with --port",
                o.port
            ));
        }
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(&server);
                c
            }
            None => Command::new(&server),
        };
        cmd.args([
            "--port",
            &o.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--protected-mode",
            "no",
        ])
        .args(["--daemonize", "no", "--enable-debug-command", "local"])
        .arg("--dir")
        .arg(o.dir)
        .args(["--appendonly", if o.aof_always { "yes" } else { "no" }])
        .args(["--appendfsync", "always"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = bulkhead_testkit::groups::spawn_joined(&mut cmd, o.procs_files)
            .map_err(|e| format!("cannot start redis-server: {e}"))?;
        let pid = child.id();
        let mut r = Redis {
            server: Server::new(child, libc::SIGTERM, Duration::from_secs(3)),
            addr: SocketAddr::from(([127, 0, 0, 1], o.port)),
            pid,
        };
        if let Err(e) = crate::loadgen::wait_ready(r.addr, Duration::from_secs(10)) {
            r.stop();
            return Err(format!("redis-server did not become ready: {e}"));
        }
        Ok(r)
    }

    /// `Some(status)` when the server has exited (crashed or was killed).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.server.exited()
    }

    /// SIGTERM, then SIGKILL after 3 s (also when dropped).
    pub fn stop(&mut self) {
        self.server.stop();
    }
}
