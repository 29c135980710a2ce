//! `check`: the summary line, then each finding (the worst first), or JSON; the exit code is
//! the verdict's (0 protected, 1 degraded, 2 not protected, 3 unknown).

use crate::args::{CheckArgs, Cli};
use crate::cmd::json;
use bulkhead::actions::check::{self, CheckLevel, Report};
use bulkhead::units::printable;

pub fn check(cli: &Cli, a: &CheckArgs) -> i32 {
    let r = check::check(&cli.context());
    if a.json {
        println!("{}", json(&r));
    } else {
        print!("{}", text(&r, a.brief));
    }
    r.exit_code
}

fn word(l: CheckLevel) -> &'static str {
    match l {
        CheckLevel::Critical => "CRITICAL",
        CheckLevel::Unknown => "UNKNOWN",
        CheckLevel::Warning => "WARNING",
        CheckLevel::Ok => "OK",
    }
}

fn rank(l: CheckLevel) -> u8 {
    match l {
        CheckLevel::Critical => 0,
        CheckLevel::Unknown => 1,
        CheckLevel::Warning => 2,
        CheckLevel::Ok => 3,
    }
}

/// The summary line; unless `brief`, every finding under it, the worst first.
fn text(r: &Report, brief: bool) -> String {
    let mut out = format!("{}\n", r.summary);
    if brief {
        return out;
    }
    let mut fs: Vec<_> = r.findings.iter().collect();
    fs.sort_by_key(|f| rank(f.level));
    for f in fs {
        let (level, accepted) = match &f.accepted {
            Some(at) => (
                "ACCEPTED",
                format!(" (accepted in the plan, {})", printable(at)),
            ),
            None => (word(f.level), String::new()),
        };
        out.push_str(&format!(
            "  {:<8} {:<9} {}{accepted}\n",
            level,
            f.area.name(),
            printable(&f.message)
        ));
        if let Some(h) = &f.hint {
            let h = printable(h);
            out.push_str(&format!("  {:<8} {:<9} hint: {h}\n", "", ""));
        }
    }
    if !r.plan.is_empty() {
        out.push_str(&format!("plan: {} ({} backend)\n", r.plan, r.backend));
    }
    out
}
