//! The progress bar of a run (hidden unless asked for).

pub(super) struct Progress {
    pub(super) bar: indicatif::ProgressBar,
}

impl Progress {
    pub(super) fn new(on: bool, total: u64) -> Progress {
        let bar = if on {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {elapsed} {msg}")
                    .unwrap(),
            );
            b
        } else {
            indicatif::ProgressBar::hidden()
        };
        Progress { bar }
    }
    pub(super) fn say(&self, m: &str) {
        self.bar.set_message(m.to_string());
    }
}
