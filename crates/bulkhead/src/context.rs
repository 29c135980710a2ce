//! The options every operation takes: the plan file, the cgroup root and the backend.

use bulkhead_cgroups::{Choice, Chosen};
use bulkhead_plan::Plan;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::path::{Path, PathBuf};

/// The largest plan file read as root.
const MAX_PLAN_BYTES: usize = 1 << 20;

/// The options every command takes.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// `-c FILE`; None: /etc/bulkhead/bulkhead.toml if it exists, else the embedded default.
    pub config: Option<PathBuf>,
    /// The cgroup slices live under (`/`, or a delegated subtree).
    pub cgroup_root: String,
    pub backend: Choice,
}

impl Context {
    /// The plan: `-c FILE`, else /etc/bulkhead/bulkhead.toml, else the embedded default. As
    /// root every command acts on it (apply writes cgroups, serve runs its commands, place
    /// moves any process, guard throttles), so it must be a file only root can change, read
    /// through the descriptor that was checked (issue 40 #12); another user reads it as any
    /// file.
    pub fn load_plan(&self) -> Result<Plan> {
        let default = Path::new(bulkhead_plan::DEFAULT_PLAN_PATH);
        let path = match self.config.as_deref() {
            Some(p) => p,
            None if default.exists() => default,
            None => return Plan::load(None),
        };
        if !bulkhead_sys::process::is_root() {
            return Plan::load(Some(path));
        }
        Plan::parse(&read_trusted(path)?, Some(path))
    }

    /// The plan file `-c` names is readable (when one is named).
    pub fn check_config(&self) -> Result<()> {
        bulkhead_plan::check_plan_file(self.config.as_deref())
    }

    /// The backend for this host, as `--backend` and `--cgroup-root` say.
    pub fn choose(&self) -> Result<Chosen> {
        bulkhead_cgroups::choose_here(self.backend, self.root())
    }

    pub fn root(&self) -> &str {
        if self.cgroup_root.is_empty() {
            "/"
        } else {
            &self.cgroup_root
        }
    }

    /// Whether slices are placed in the machine's own cgroup root (no delegated subtree).
    pub fn default_root(&self) -> bool {
        self.cgroup_root.trim_matches('/').is_empty()
    }
}

/// A plan file root may act on: root's, writable by nobody else, on a path only root can
/// change, read through the descriptor that was checked.
fn read_trusted(path: &Path) -> Result<String> {
    use bulkhead_sys::trusted::{read_root_file, RootFileError};
    read_root_file(path, MAX_PLAN_BYTES).map_err(|e| {
        let at = path.display().to_string();
        Error::invalid(match e {
            RootFileError::Untrusted(why) => Diagnostic::error(format!("refusing the plan file: it {why}"))
                .at(at)
                .hint("bulkhead acts as root on the plan (cgroups, commands, other users' processes): make the file root's and writable only by root (chown root: FILE; chmod go-w FILE)"),
            RootFileError::Io(err) => Diagnostic::error(format!("cannot read the plan file: {err}"))
                .at(at)
                .hint("-c names the plan file; it must be a regular file, not a symlink (create it with `bulkhead plan show > FILE`)"),
        })
    })
}
