//! What one connection measured: totals and an HDR histogram of the measured window, and
//! the same per second of it (so a report can show isolation and p99 over time).

use hdrhistogram::Histogram;
use tokio::time::Instant;

/// Highest latency the histograms hold, microseconds (60 s); slower requests saturate.
pub const HIST_MAX_US: u64 = 60_000_000;
/// Seconds of per-second figures a run keeps at most (longer windows fold into the last).
const MAX_SECONDS: usize = 3600;

/// One second of the measured window.
pub struct Second {
    pub ops: u64,
    pub errors: u64,
    pub hist: Histogram<u64>,
}

impl Second {
    fn new() -> Second {
        Second {
            ops: 0,
            errors: 0,
            // Two significant digits are plenty per second, and keep each small.
            hist: Histogram::new_with_bounds(1, HIST_MAX_US, 2).expect("valid histogram bounds"),
        }
    }
}

pub struct Stats {
    pub hist: Histogram<u64>,
    pub ops: u64,
    pub gets: u64,
    pub sets: u64,
    pub errors: u64,
    /// When the connection stopped (at most the end of the window).
    pub stopped: Instant,
    /// By second since the window started.
    pub seconds: Vec<Second>,
}

impl Stats {
    pub fn new() -> Self {
        Stats {
            hist: Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("valid histogram bounds"),
            ops: 0,
            gets: 0,
            sets: 0,
            errors: 0,
            stopped: Instant::now(),
            seconds: Vec::new(),
        }
    }

    fn second(&mut self, i: usize) -> &mut Second {
        let i = i.min(MAX_SECONDS - 1);
        while self.seconds.len() <= i {
            self.seconds.push(Second::new());
        }
        &mut self.seconds[i]
    }

    /// A completed request, `us` after it was due, in second `sec` of the window.
    pub fn record(&mut self, sec: usize, us: u64, get: bool) {
        self.hist.saturating_record(us.max(1));
        self.ops += 1;
        if get {
            self.gets += 1;
        } else {
            self.sets += 1;
        }
        let s = self.second(sec);
        s.ops += 1;
        s.hist.saturating_record(us.max(1));
    }

    pub fn error(&mut self, sec: usize, n: u64) {
        self.errors += n;
        self.second(sec).errors += n;
    }

    pub fn merge(&mut self, o: &Stats) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&o.hist);
        self.ops += o.ops;
        self.gets += o.gets;
        self.sets += o.sets;
        self.errors += o.errors;
        for (i, s) in o.seconds.iter().enumerate() {
            let mine = self.second(i);
            mine.ops += s.ops;
            mine.errors += s.errors;
            let _ = mine.hist.add(&s.hist);
        }
    }
}
