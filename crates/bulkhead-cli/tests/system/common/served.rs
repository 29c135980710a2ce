//! One served socket, the fixture of the activation and socket escape tests: a scratch
//! directory, a unique socket name, its listen and backend ports, the plan's `[socket.NAME]`
//! and `[socket.NAME.target]` tables set key by key, and `serve` started on that plan. A test
//! says only what differs from the common socket (TCP on loopback, proxied to a backend port).

use super::serve::{bulkhead, status, Scratch, Serve, PY};
use bulkhead_testkit::TestRoot;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A TOML string: `"..."`, escaped (a JSON string is a TOML basic string).
pub fn q(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).expect("a string serialises")
}

/// A TOML array of strings.
pub fn arr<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items.iter().map(q).collect();
    format!("[{}]", items.join(", "))
}

/// A path as a TOML string.
pub fn qp(p: &Path) -> String {
    q(p.display().to_string())
}

pub struct Served {
    pub s: Scratch,
    pub name: String,
    /// The port `serve` listens on (127.0.0.1).
    pub port: u16,
    /// The port the target listens on (127.0.0.1), for the default backend.
    pub backend: u16,
    head: String,
    socket: Vec<(String, String)>,
    target: Vec<(String, String)>,
}

impl Served {
    /// `[socket.BASE-TAG]` listening on 127.0.0.1:port, proxied to 127.0.0.1:backend, in a
    /// scratch directory `/var/tmp/bulkhead-PREFIX-TAG`; no target command yet.
    pub fn new(prefix: &str, base: &str) -> Served {
        let s = Scratch::new(prefix);
        let name = s.name(base);
        let (port, backend) = (bulkhead_testkit::free_port(), bulkhead_testkit::free_port());
        let mut f = Served {
            s,
            name,
            port,
            backend,
            head: String::new(),
            socket: Vec::new(),
            target: Vec::new(),
        };
        f.set("listen", arr(&[format!("127.0.0.1:{port}")]));
        f.set("backend", q(format!("127.0.0.1:{backend}")));
        f
    }

    /// Sets a key of `[socket.NAME]` to a TOML value (replacing an earlier one).
    pub fn set(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        put(&mut self.socket, key, value.into());
        self
    }

    /// Removes a key of `[socket.NAME]` (the default backend, for pass and per-connection).
    pub fn unset(&mut self, key: &str) -> &mut Self {
        self.socket.retain(|(k, _)| k != key);
        self
    }

    /// Sets a key of `[socket.NAME.target]` to a TOML value.
    pub fn target(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        put(&mut self.target, key, value.into());
        self
    }

    /// The target's command line.
    pub fn command<S: AsRef<str>>(&mut self, argv: &[S]) -> &mut Self {
        self.target("command", arr(argv))
    }

    /// A python3 script written to the scratch directory as the target's command.
    pub fn python(&mut self, file: &str, code: &str) -> &mut Self {
        let script = self.s.write(file, code);
        self.command(&[PY, &script.display().to_string()])
    }

    /// busybox httpd on the backend port, serving `page` as /index.html (unsandboxed).
    pub fn httpd(&mut self, page: &str) -> &mut Self {
        let www = self.s.dir.join("www");
        std::fs::create_dir_all(&www).unwrap();
        std::fs::write(www.join("index.html"), page).unwrap();
        let (listen, www) = (
            format!("127.0.0.1:{}", self.backend),
            www.display().to_string(),
        );
        self.command(&["/bin/busybox", "httpd", "-f", "-p", &listen, "-h", &www])
    }

    /// The target in a sandbox on the scratch busybox root (which serves /www/index.html).
    pub fn sandboxed(&mut self) -> &mut Self {
        let root = self.s.root();
        self.target("rootfs", qp(&root))
    }

    /// A sandbox for each connection (inetd's Accept=yes), on the scratch busybox root.
    pub fn per_connection(&mut self) -> &mut Self {
        self.unset("backend")
            .set("mode", q("per-connection"))
            .sandboxed()
    }

    /// `[slice.NAME]` with these directives (TOML lines) in the plan, the target's slice.
    pub fn slice(&mut self, name: &str, directives: &str) -> &mut Self {
        self.head = format!("[slice.{name}]\n{directives}\n");
        self.target("slice", q(name))
    }

    /// The whole plan.
    pub fn text(&self) -> String {
        let table = |rows: &[(String, String)]| {
            rows.iter()
                .map(|(k, v)| format!("{k} = {v}\n"))
                .collect::<String>()
        };
        format!(
            "{}\n[socket.{n}]\n{}[socket.{n}.target]\n{}",
            self.head,
            table(&self.socket),
            table(&self.target),
            n = self.name
        )
    }

    /// Writes the plan as `plan.toml` in the scratch directory.
    pub fn plan(&self) -> PathBuf {
        self.s.write("plan.toml", &self.text())
    }

    /// `bulkhead -c plan.toml serve`, once it listens (its log: `serve.log`).
    pub fn start(&self) -> Serve {
        Serve::start(&self.plan(), self.log())
    }

    /// `bulkhead -c plan.toml ARGS` under the test's own cgroup root.
    pub fn in_root(&self, root: &TestRoot, args: &[&str]) -> Command {
        let mut c = bulkhead();
        c.env("BULKHEAD_CGROUP_ROOT", &root.cgroup)
            .arg("-c")
            .arg(self.plan())
            .args(args);
        c
    }

    /// The plan applied under the test's own cgroup root (its slices), then `serve` started
    /// there once it listens: for targets that run in a slice.
    pub fn start_in(&self, root: &TestRoot) -> Serve {
        let o = self.in_root(root, &["apply", "-q"]).output().unwrap();
        assert!(
            o.status.success(),
            "apply: {}",
            bulkhead_testkit::stderr(&o)
        );
        Serve::start_cmd(self.in_root(root, &["serve"]), self.log())
    }

    pub fn log(&self) -> PathBuf {
        self.s.dir.join("serve.log")
    }

    /// The socket's status file.
    pub fn status(&self) -> serde_json::Value {
        status(&self.name)
    }
}

fn put(rows: &mut Vec<(String, String)>, key: &str, value: String) {
    match rows.iter_mut().find(|(k, _)| k == key) {
        Some(row) => row.1 = value,
        None => rows.push((key.to_string(), value)),
    }
}
