//! One rendered page shared by the scrapes of about a second: the first scrape after the page
//! went stale renders it (on a blocking thread: reading cgroup files blocks), the ones that
//! come meanwhile wait for that render instead of starting their own (single flight), and
//! every scrape within [`Page::new`]'s `fresh_for` of the render's start gets the same text.

use super::served::Counters;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Page<F> {
    render: Arc<F>,
    fresh_for: Duration,
    /// The last page and when its render started.
    last: Mutex<Option<(Instant, Arc<String>)>>,
    /// Held by the one render in flight.
    flight: tokio::sync::Mutex<()>,
}

impl<F> Page<F>
where
    F: Fn() -> String + Send + Sync + 'static,
{
    pub fn new(render: Arc<F>, fresh_for: Duration) -> Page<F> {
        Page {
            render,
            fresh_for,
            last: Mutex::new(None),
            flight: tokio::sync::Mutex::new(()),
        }
    }

    fn fresh(&self) -> Option<Arc<String>> {
        let g = self.last.lock().ok()?;
        g.as_ref()
            .filter(|(at, _)| at.elapsed() < self.fresh_for)
            .map(|(_, p)| p.clone())
    }

    /// The page: the fresh one, the one being rendered, or a new render.
    pub async fn get(&self, n: &Counters) -> Arc<String> {
        if let Some(p) = self.fresh() {
            return p;
        }
        let _one = self.flight.lock().await;
        // Rendered while this one waited.
        if let Some(p) = self.fresh() {
            return p;
        }
        let at = Instant::now();
        let render = self.render.clone();
        let text = tokio::task::spawn_blocking(move || render())
            .await
            .unwrap_or_default();
        n.renders.fetch_add(1, Relaxed);
        let p = Arc::new(text);
        if let Ok(mut g) = self.last.lock() {
            *g = Some((at, p.clone()));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[tokio::test]
    async fn concurrent_scrapes_share_one_render_and_a_stale_page_is_rendered_again() {
        let calls = Arc::new(AtomicU64::new(0));
        let c = calls.clone();
        let page = Arc::new(Page::new(
            Arc::new(move || {
                std::thread::sleep(Duration::from_millis(50));
                format!("n {}\n", c.fetch_add(1, Relaxed) + 1)
            }),
            Duration::from_millis(300),
        ));
        let n = Arc::new(Counters::default());
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (p, n) = (page.clone(), n.clone());
            tasks.push(tokio::spawn(async move { p.get(&n).await }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().as_str(), "n 1\n");
        }
        assert_eq!(calls.load(Relaxed), 1);
        assert_eq!(n.renders.load(Relaxed), 1);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(page.get(&n).await.as_str(), "n 2\n");
    }
}
