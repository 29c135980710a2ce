//! `serve`: socket activation for the plan's `[socket.NAME]` sections. Targets start as
//! `bulkhead spawn` or `bulkhead run` with the same global options as serve itself.

use super::Context;
use crate::activate::frozen::Freezer;
use crate::activate::{self, Log};
pub use crate::activate::{
    GlobalArgs, How, RenderTarget, RunTarget, TargetCommand, TargetLauncher,
};
use bulkhead_cgroups::Chosen;
use bulkhead_plan::socket::{Mode, OnIdle, SocketSpec};
use bulkhead_plan::Plan;
use bulkhead_sys::error::{Error, Result};

/// The plan and the sockets to serve, checked, with how their targets start.
pub struct Served {
    pub plan: Plan,
    pub sockets: Vec<SocketSpec>,
    pub launcher: TargetLauncher,
}

/// Select the sockets (all of the plan's, or those named) and build the target launcher;
/// `render` spells a target's command line (the CLI's grammar is the CLI's).
pub fn prepare(cx: &Context, names: &[String], render: RenderTarget) -> Result<Served> {
    let plan = cx.load_plan()?;
    let sockets = activate::select(&plan, names)?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::failed(format!("cannot find bulkhead's own binary: {e}")))?;
    // Only a plain target in pass mode is given sockets through `run`.
    let passes_to_run = sockets
        .iter()
        .any(|s| s.mode == Mode::Pass && s.target.rootfs.is_none());
    // How idle targets freeze: a cell below the slice, or the target's systemd unit.
    let freezer = match sockets.iter().any(|s| s.on_idle == OnIdle::Freeze) {
        true => match cx.choose() {
            Ok(Chosen::Cgroupfs(fs)) => Some(Freezer::Cells(fs)),
            Ok(Chosen::Systemd(s)) => Some(Freezer::Units(std::sync::Arc::from(s))),
            Err(_) => None,
        },
        false => None,
    };
    Ok(Served {
        plan,
        sockets,
        launcher: TargetLauncher {
            exe,
            globals: global_args(cx),
            scope_for_fds: passes_to_run && matches!(cx.choose(), Ok(Chosen::Systemd(_))),
            render,
            freezer,
        },
    })
}

/// What a target's `bulkhead spawn|run` gets besides its own options.
fn global_args(cx: &Context) -> GlobalArgs {
    GlobalArgs {
        // Absolute: the target may run with another working directory.
        config: cx
            .config
            .as_ref()
            .map(|c| std::path::absolute(c).unwrap_or_else(|_| c.clone())),
        cgroup_root: (!cx.default_root()).then(|| cx.cgroup_root.clone()),
        backend: cx.backend,
    }
}

impl Served {
    /// `--dry-run`: what would listen and how each target would start.
    pub fn describe(&self) -> Result<Vec<String>> {
        activate::check(&self.plan, &self.sockets)?;
        Ok(activate::describe(&self.sockets, &self.launcher))
    }

    /// Serve until SIGTERM or SIGINT; returns once every target stopped.
    pub fn run(self, quiet: bool) -> Result<()> {
        // A client that goes away must be an EPIPE for the proxy, not the end of bulkhead.
        // The targets get SIGPIPE back (std resets it for every child).
        bulkhead_sys::signals::ignore(libc::SIGPIPE);
        activate::serve(&self.plan, self.sockets, self.launcher, Log { quiet })
    }
}
