//! A throwaway PostgreSQL 15 cluster (initdb in a temporary directory, a free port, a
//! socket directory of its own), started as the postgres user, stopped and removed on drop.
//! Never the system's clusters.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct Cluster {
    pub dir: PathBuf,
    pub port: u16,
    postmaster: Option<Child>,
    uid: u32,
    gid: u32,
}

/// Why a cluster cannot be made here, if it cannot.
pub fn problem() -> Option<String> {
    if !std::path::Path::new(BIN).join("initdb").exists() {
        return Some(format!(
            "PostgreSQL 15 is not installed ({BIN}): apt-get install postgresql-15"
        ));
    }
    if bulkhead_sys::users::user_by_name("postgres").is_none() {
        return Some("no postgres user: apt-get install postgresql-15".into());
    }
    None
}

impl Cluster {
    /// initdb and start, `name` its directory; with `cluster_name`, also its cluster_name
    /// (titles "postgres: NAME: ..."), without it as `initdb` leaves a cluster ("postgres:
    /// ..." only).
    pub fn start(name: &str, cluster_name: bool) -> Cluster {
        let u = bulkhead_sys::users::user_by_name("postgres").expect("postgres user");
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chown")
            .args([&format!("{}:{}", u.uid, u.gid), dir.to_str().unwrap()])
            .status();
        let mut c = Cluster {
            dir,
            port: bulkhead_testkit::net::free_port(),
            postmaster: None,
            uid: u.uid,
            gid: u.gid,
        };
        let o = c
            .as_postgres(&format!("{BIN}/initdb"))
            .args([
                "-D",
                c.data().to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let pm = c
            .as_postgres(&format!("{BIN}/postgres"))
            .args(["-D", c.data().to_str().unwrap(), "-p", &c.port.to_string()])
            .args(["-k", c.dir.to_str().unwrap(), "-c", "listen_addresses="])
            .args(["-c", "shared_buffers=16MB"])
            .args(if cluster_name {
                vec!["-c".to_string(), format!("cluster_name={name}")]
            } else {
                vec![]
            })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        c.postmaster = Some(pm);
        let end = Instant::now() + Duration::from_secs(60);
        while !c.sql("postgres", "select 1").status.success() {
            assert!(Instant::now() < end, "PostgreSQL did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn postmaster_pid(&self) -> i32 {
        self.postmaster.as_ref().unwrap().id() as i32
    }

    /// A command run as the postgres user.
    pub fn as_postgres(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.uid(self.uid).gid(self.gid).current_dir(&self.dir);
        c.env("PGHOST", &self.dir)
            .env("PGPORT", self.port.to_string());
        c
    }

    /// psql as `role`, one command, tuples only.
    pub fn sql(&self, role: &str, sql: &str) -> Output {
        self.psql(role, sql).output().unwrap()
    }

    pub fn psql(&self, role: &str, sql: &str) -> Command {
        let mut c = self.as_postgres(&format!("{BIN}/psql"));
        c.args([
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            role,
            "-d",
            "postgres",
        ])
        .args(["-c", sql]);
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut pm) = self.postmaster.take() {
            // Fast shutdown, then make sure.
            let _ = bulkhead_sys::process::kill(pm.id() as i32, libc::SIGINT);
            let end = Instant::now() + Duration::from_secs(20);
            while pm.try_wait().ok().flatten().is_none() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", pm.id())])
                .stderr(Stdio::null())
                .status();
            let _ = pm.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
