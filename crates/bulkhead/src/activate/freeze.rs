//! `on_idle = "freeze"`: an idle target is frozen instead of stopped, and thawed by the
//! next connection before the proxy dials it. With the cgroupfs backend its processes move
//! from the target's slice into the socket's freeze cell (a cgroup of serve's own below the
//! slice, [`bulkhead_cgroups::fs::FreezeCell`]), which the kernel's freezer then stops; a
//! booted container's own cgroups below the slice are frozen with it. With systemd, the
//! target's own transient unit is frozen (FreezeUnit). A frozen target holds its memory and
//! uses no CPU. After `freeze_timeout` frozen it is thawed and stopped.

use super::frozen::{freeze_blocking, Freezer, Frozen, Hold};
use super::target::{show, Activator, State};
use bulkhead_cgroups::fs::FreezeCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Activator {
    /// How this target would be held frozen (made on the first freeze, then kept).
    fn hold(&self, pid: u32) -> Result<Hold, String> {
        match &self.launcher.freezer {
            Some(Freezer::Cells(fs)) => {
                let slice = self
                    .spec
                    .target
                    .slice
                    .as_ref()
                    .ok_or("the target has no slice")?;
                let name = format!("bulkhead-serve-{}", self.spec.name);
                let cell = fs.freeze_cell(slice, &name).map_err(|e| e.to_string())?;
                Ok(Hold::Cell {
                    cell: Arc::new(cell),
                    nested: Vec::new(),
                })
            }
            // The units `run` and `spawn` start with the systemd backend, named by their PID.
            Some(Freezer::Units(systemd)) => Ok(Hold::Unit {
                systemd: systemd.clone(),
                unit: match self.spec.target.rootfs {
                    Some(_) => format!("bulkhead-spawn-{pid}.scope"),
                    None => format!("bulkhead-run-{pid}.service"),
                },
            }),
            None => Err("no cgroup backend to freeze with".into()),
        }
    }

    /// The target was idle for `idle`: freeze it, or stop it where it cannot be frozen.
    pub fn freeze(self: &Arc<Self>, idle: Duration) {
        let why = format!("idle for {}", show(idle));
        let mut g = self.inner.lock().unwrap();
        let (Some(pid), State::Ready) = (g.pid, g.state) else {
            return;
        };
        let hold = match g.frozen.as_ref().map(|f| f.hold.clone()) {
            Some(h) => h,
            None => match self.hold(pid) {
                Ok(h) => h,
                Err(e) => {
                    drop(g);
                    return self.cannot_freeze(&why, &e);
                }
            },
        };
        g.state = State::Freezing;
        drop(g);
        self.bump();
        let me = self.clone();
        tokio::spawn(async move {
            let done = tokio::task::spawn_blocking(move || freeze_blocking(hold, pid)).await;
            match done {
                Ok(Ok((hold, n, memory))) => me.frozen(hold, n, memory, &why),
                Ok(Err(e)) => me.unfreeze_failed(&e, &why),
                Err(e) => me.unfreeze_failed(&e.to_string(), &why),
            }
        });
    }

    fn cannot_freeze(self: &Arc<Self>, why: &str, how: &str) {
        self.log.line(&format!(
            "[{}] cannot freeze the target ({how}): stopping it instead",
            self.spec.name
        ));
        self.stop(why);
    }

    fn unfreeze_failed(self: &Arc<Self>, err: &str, why: &str) {
        let mut g = self.inner.lock().unwrap();
        if g.state == State::Freezing {
            g.state = State::Ready;
        }
        drop(g);
        self.bump();
        self.cannot_freeze(why, err);
    }

    /// The freeze is done: the target is Frozen, unless something came meanwhile (a
    /// connection, serve's end), which thaws it at once.
    fn frozen(self: &Arc<Self>, hold: Hold, procs: usize, memory: Option<u64>, why: &str) {
        let mut g = self.inner.lock().unwrap();
        let at = hold.describe();
        g.frozen = Some(Frozen {
            hold,
            since: Some(Instant::now()),
            memory,
        });
        g.freeze_counts.freezes += 1;
        let wanted = g.state == State::Freezing && g.active == 0;
        if wanted {
            g.state = State::Frozen;
        }
        let epoch = g.epoch;
        drop(g);
        let what = match (procs, memory) {
            (0, _) => at,
            (n, Some(m)) => format!(
                "{n} process(es), {} resident, in {at}",
                bulkhead_sys::units::human_bytes(m)
            ),
            (n, None) => format!("{n} process(es) in {at}"),
        };
        self.log.line(&format!(
            "[{}] target frozen ({what}): {why}",
            self.spec.name
        ));
        if !wanted {
            // A connection (or serve's end) came while it froze.
            self.thaw("a connection came while it froze");
            return;
        }
        self.bump();
        if let Some(limit) = self.spec.freeze_timeout {
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                let g = me.inner.lock().unwrap();
                if g.state == State::Frozen && g.epoch == epoch {
                    drop(g);
                    me.stop(&format!("frozen for {}", show(limit)));
                }
            });
        }
    }

    /// Thaw a frozen (or freezing) target; it is Ready again. Returns how long it took.
    pub fn thaw(self: &Arc<Self>, why: &str) -> Option<Duration> {
        let t0 = Instant::now();
        let mut g = self.inner.lock().unwrap();
        let f = g.frozen.as_mut()?;
        let was = f.since.take();
        if let Err(e) = f.hold.set(false) {
            self.log.line(&format!(
                "[{}] cannot thaw the target ({e}): {}",
                self.spec.name,
                f.hold.describe()
            ));
        }
        if matches!(g.state, State::Frozen | State::Freezing) {
            g.state = State::Ready;
        }
        let took = t0.elapsed();
        g.freeze_counts.thaws += 1;
        g.freeze_counts.last_thaw = Some(took);
        drop(g);
        self.bump();
        self.log.line(&format!(
            "[{}] target thawed in {:.2} ms{}: {why}",
            self.spec.name,
            took.as_secs_f64() * 1e3,
            was.map_or(String::new(), |w| format!(
                " after {} frozen",
                show(w.elapsed())
            ))
        ));
        Some(took)
    }

    /// The target ended: its cell goes (thawed first; emptied by the target's end). A unit
    /// goes with its process.
    pub fn drop_cell(&self) {
        let f = self.inner.lock().unwrap().frozen.take();
        let Some(Frozen {
            hold: Hold::Cell { cell, .. },
            ..
        }) = f
        else {
            return;
        };
        let path = cell.path().to_path_buf();
        if let Ok(Err(e)) = Arc::try_unwrap(cell).map(FreezeCell::remove) {
            self.log.line(&format!(
                "[{}] could not remove the freeze cell {}: {e}",
                self.spec.name,
                path.display()
            ));
        }
    }
}
