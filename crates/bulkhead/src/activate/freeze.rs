//! `on_idle = "freeze"`: an idle target is frozen instead of stopped, and thawed by the
//! next connection before the proxy dials it. Its processes move from the target's slice into
//! the socket's freeze cell (a cgroup of serve's own below the slice,
//! [`bulkhead_cgroups::fs::FreezeCell`]), which the kernel's freezer then stops; a booted
//! container's own cgroups below the slice are frozen with it. A frozen target holds its
//! memory and uses no CPU. After `freeze_timeout` frozen it is thawed and stopped.

use super::frozen::{freeze_tree, resident, Frozen};
use super::target::{show, Activator, State};
use bulkhead_cgroups::fs::FreezeCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Activator {
    /// The target was idle for `idle`: freeze it, or stop it where it cannot be frozen.
    pub fn freeze(self: &Arc<Self>, idle: Duration) {
        let why = format!("idle for {}", show(idle));
        let mut g = self.inner.lock().unwrap();
        let (Some(pid), State::Ready) = (g.pid, g.state) else {
            return;
        };
        let cell = match (&g.frozen, &self.launcher.cells, &self.spec.target.slice) {
            (Some(f), _, _) => f.cell.clone(),
            (None, Some(fs), Some(slice)) => {
                match fs.freeze_cell(slice, &format!("bulkhead-serve-{}", self.spec.name)) {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        drop(g);
                        return self.cannot_freeze(&why, &e.to_string());
                    }
                }
            }
            _ => {
                drop(g);
                let how = "the systemd backend gives serve no cgroup of its own below the slice";
                return self.cannot_freeze(&why, how);
            }
        };
        g.state = State::Freezing;
        drop(g);
        self.bump();
        let me = self.clone();
        tokio::spawn(async move {
            let c = cell.clone();
            let done = tokio::task::spawn_blocking(move || {
                let r = freeze_tree(&c, pid);
                (r, resident(&c.pids()))
            })
            .await;
            match done {
                Ok((Ok((nested, n)), memory)) => me.frozen(cell, nested, n, memory, &why),
                Ok((Err(e), _)) => {
                    let _ = cell.set(false, &[]);
                    me.unfreeze_failed(&e.to_string(), &why)
                }
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
    fn frozen(
        self: &Arc<Self>,
        cell: Arc<FreezeCell>,
        nested: Vec<String>,
        procs: usize,
        memory: u64,
        why: &str,
    ) {
        let mut g = self.inner.lock().unwrap();
        g.frozen = Some(Frozen {
            cell,
            nested,
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
        self.log.line(&format!(
            "[{}] target frozen ({procs} process(es), {} resident): {why}",
            self.spec.name,
            bulkhead_sys::units::human_bytes(memory)
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
        if let Err(e) = f.cell.set(false, &f.nested) {
            self.log.line(&format!(
                "[{}] cannot thaw the target ({e}): {}",
                self.spec.name,
                f.cell.path().display()
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

    /// The target ended: its cell goes (thawed first; emptied by the target's end).
    pub fn drop_cell(&self) {
        let f = self.inner.lock().unwrap().frozen.take();
        if let Some(f) = f {
            let path = f.cell.path().to_path_buf();
            let removed = Arc::try_unwrap(f.cell).map(FreezeCell::remove);
            if let Ok(Err(e)) = removed {
                self.log.line(&format!(
                    "[{}] could not remove the freeze cell {}: {e}",
                    self.spec.name,
                    path.display()
                ));
            }
        }
    }
}
