//! The options every operation takes: the plan file, the cgroup root and the backend.

use bulkhead_cgroups::{Choice, Chosen};
use bulkhead_plan::Plan;
use bulkhead_sys::error::Result;
use std::path::PathBuf;

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
    pub fn load_plan(&self) -> Result<Plan> {
        Plan::load(self.config.as_deref())
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
