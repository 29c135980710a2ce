//! Whether `bulkhead place` runs for the plan: its placement rules, and its services with a
//! pidfile where no systemd attaches them, act only while it runs. From its state file
//! (`place::state`, read by the front door): not running, running an older plan, or running
//! this one. Pure.

use super::verdict::{Area, Finding, Level};

/// What the state file says, judged by the front door.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placer {
    /// No state file: never started for this cgroup root, or stopped.
    Missing,
    /// The file names a process that is gone (killed, crashed, or the host rebooted).
    Gone { pid: i32 },
    /// The process runs but has not written for `age` seconds (hung).
    Stale { pid: i32, age: u64 },
    Running {
        pid: i32,
        /// The plan it read is the plan `check` read (same digest).
        same_plan: bool,
        plan: String,
    },
}

/// The finding, when the plan needs `place` (`needs`: what it would do, e.g. "2 placement
/// rules"); None when it does not.
pub fn finding(p: &Placer, needs: Option<&str>) -> Option<Finding> {
    let needs = needs?;
    let start = "start it: bulkhead place (without systemd: /etc/init.d/bulkhead-place start; with it: systemctl enable --now bulkhead-place)";
    let not_running = |why: String| {
        Finding::new(
            Area::Placement,
            Level::Warning,
            format!("bulkhead place is not running ({why}): the plan's {needs} place nothing that starts from now on"),
        )
        .hint(start)
    };
    Some(match p {
        Placer::Missing => not_running("no state file".into()),
        Placer::Gone { pid } => not_running(format!("its process {pid} is gone")),
        Placer::Stale { pid, age } => not_running(format!(
            "process {pid} has not written its heartbeat for {age} s: hung?"
        )),
        Placer::Running {
            pid,
            same_plan: true,
            ..
        } => Finding::new(
            Area::Placement,
            Level::Ok,
            format!("bulkhead place runs (PID {pid}) with this plan: {needs}"),
        ),
        Placer::Running { pid, plan, .. } => Finding::new(
            Area::Placement,
            Level::Warning,
            format!("bulkhead place (PID {pid}) runs an older version of {plan}: it places by rules that are not the plan's now"),
        )
        .hint(format!("kill -HUP {pid} (it reads the plan again, and keeps its rules if the new plan has an error)")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn place_not_running_is_a_warning_only_when_the_plan_needs_it() {
        assert_eq!(finding(&Placer::Missing, None), None);
        for p in [
            Placer::Missing,
            Placer::Gone { pid: 7 },
            Placer::Stale { pid: 7, age: 90 },
        ] {
            let f = finding(&p, Some("2 placement rules")).unwrap();
            assert_eq!((f.area, f.level), (Area::Placement, Level::Warning));
            assert!(
                f.message.starts_with("bulkhead place is not running"),
                "{f:?}"
            );
            assert!(f.message.contains("2 placement rules"), "{f:?}");
        }
        let running = |same_plan| Placer::Running {
            pid: 7,
            same_plan,
            plan: "p.toml".into(),
        };
        let f = finding(&running(true), Some("1 rule")).unwrap();
        assert_eq!(f.level, Level::Ok);
        let f = finding(&running(false), Some("1 rule")).unwrap();
        assert_eq!(f.level, Level::Warning);
        assert!(f.message.contains("older version of p.toml"), "{f:?}");
        assert_eq!(
            f.hint.as_deref().map(|h| h.starts_with("kill -HUP 7")),
            Some(true)
        );
    }
}
