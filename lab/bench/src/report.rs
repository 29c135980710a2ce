//! What every benchmark report shares: numbers for people, the checks against targets, and
//! the chart font.

use std::fmt::Write as _;

pub fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in s.chars().rev().enumerate() {
        if i > 0 && i % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out.chars().rev().collect()
}

fn font() -> Option<&'static [u8]> {
    for p in [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
    ] {
        if let Ok(b) = std::fs::read(p) {
            return Some(Box::leak(b.into_boxed_slice()));
        }
    }
    None
}

/// Register the font the charts' text uses.
pub fn register_font() -> Result<(), String> {
    let bytes = font().ok_or(
        "no DejaVuSans.ttf found for the chart's text (apt-get install fonts-dejavu-core)",
    )?;
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
        .map_err(|_| "cannot load the chart font".to_string())
}

/// One figure a benchmark is held to: what, the target, what was measured, whether it was met.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Check {
    pub what: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// The checks and skipped peers, one line each, as the end of a text report.
pub fn checks_text(checks: &[Check], skipped: &[String]) -> String {
    let width = checks.iter().map(|c| c.what.len()).max().unwrap_or(0);
    let mut s = String::new();
    for c in checks {
        let _ = writeln!(
            s,
            "{} {:<width$} target {:<8} measured {}",
            if c.met { "met   " } else { "MISSED" },
            c.what,
            c.target,
            c.measured
        );
    }
    for k in skipped {
        let _ = writeln!(s, "skipped: {k}");
    }
    s
}

/// The machine line of a report: CPUs, memory and kernel.
pub fn machine() -> String {
    let m = bulkhead::actions::hugepages::meminfo();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs, {:.0} GiB, Linux {}",
        m.mem_total as f64 / (1u64 << 30) as f64,
        kernel.trim()
    )
}
