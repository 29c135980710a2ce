//! Pass mode: bulkhead does not accept; it waits until a listening socket is readable,
//! starts the target with the sockets as fds 3.. (systemd's protocol), and watches again
//! once the target exits.

use super::launch;
use super::target::{self, Activator};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;

fn any_readable(fds: &[OwnedFd]) -> bool {
    let b: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
    bulkhead_sys::fd::any_readable(&b)
}

/// Pass mode: wait for a client without accepting, start the target with the listening
/// sockets as fds 3.., and watch again when it exits.
pub async fn pass_loop(act: Arc<Activator>, fds: Vec<OwnedFd>) {
    let watches: Vec<AsyncFd<OwnedFd>> = match fds
        .iter()
        .map(|fd| bulkhead_sys::fd::async_readable(fd.try_clone()?))
        .collect::<std::io::Result<_>>()
    {
        Ok(w) => w,
        Err(e) => {
            act.log.line(&format!(
                "[{}] cannot watch the sockets: {e}",
                act.spec.name
            ));
            return;
        }
    };
    let mut failures = 0u32;
    loop {
        while !any_readable(&fds) {
            let waits = watches.iter().map(|w| Box::pin(w.readable()));
            tokio::select! {
                r = futures_select(waits) => {
                    if let Ok(mut g) = r {
                        g.clear_ready();
                    }
                }
                _ = act.stopped() => return,
            }
        }
        let target = act.launcher.target(&act.spec, fds.len() as u32, None, &[]);
        let t0 = Instant::now();
        let mut child = match launch::start_process(
            &act.launcher,
            &target,
            &fds.iter().map(|f| f.as_fd()).collect::<Vec<_>>(),
            None,
        ) {
            Ok(c) => c,
            Err(e) => {
                act.log
                    .line(&format!("[{}] cannot start the target: {e}", act.spec.name));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        {
            let mut g = act.inner.lock().unwrap();
            g.state = target::State::Ready;
            g.pid = child.id();
            g.started(t0.elapsed());
        }
        act.changed.send_modify(|v| *v += 1);
        act.log.line(&format!(
            "[{}] started the target (pid {}) with {} listening socket(s)",
            act.spec.name,
            child.id().unwrap_or(0),
            fds.len()
        ));
        let st = tokio::select! {
            st = child.wait() => st,
            _ = act.stopped() => {
                act.terminate(&mut child).await;
                act.inner.lock().unwrap().pid = None;
                return;
            }
        };
        after_exit(&act, st, t0.elapsed(), &fds, &mut failures).await;
    }
}

/// The target exited after `ran`: idle again, or (it died at once) a back-off first.
async fn after_exit(
    act: &Activator,
    st: std::io::Result<std::process::ExitStatus>,
    ran: Duration,
    fds: &[OwnedFd],
    failures: &mut u32,
) {
    {
        let mut g = act.inner.lock().unwrap();
        g.state = target::State::Idle;
        g.pid = None;
    }
    act.changed.send_modify(|v| *v += 1);
    let st_text = st
        .as_ref()
        .map(|s| target::status_text(*s))
        .unwrap_or_else(|e| e.to_string());
    let ok = st.as_ref().is_ok_and(|s| s.success());
    // A target that dies at once while clients wait would be restarted in a tight loop:
    // back off as systemd's start limit does.
    if ran < Duration::from_secs(1) && (!ok || any_readable(fds)) {
        *failures += 1;
        let wait = Duration::from_millis(100 << (*failures).min(8)).min(Duration::from_secs(30));
        {
            let mut g = act.inner.lock().unwrap();
            g.failed_starts += 1;
            g.last_error = Some(format!("exited after {} ms ({st_text})", ran.as_millis()));
        }
        act.log.line(&format!(
            "[{}] the target exited after {} ms ({st_text}); next start in {}",
            act.spec.name,
            ran.as_millis(),
            target::show(wait)
        ));
        tokio::time::sleep(wait).await;
    } else {
        *failures = 0;
        act.log.line(&format!(
            "[{}] the target exited ({st_text})",
            act.spec.name
        ));
    }
}

/// The first of several futures to finish (a tiny select_all, to avoid a dependency).
async fn futures_select<F: std::future::Future + Unpin>(
    futs: impl Iterator<Item = F>,
) -> F::Output {
    let mut futs: Vec<F> = futs.collect();
    std::future::poll_fn(move |cx| {
        for f in futs.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}
