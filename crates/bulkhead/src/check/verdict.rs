//! The verdict: findings in, one state out (the Nagios/Icinga plugin convention's four), and
//! the one-line summary a monitor shows. Pure: no files, no processes.

/// How bad one finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Checked and as it should be (said in the details, never in the summary).
    Ok,
    /// Protection is weaker than planned.
    Warning,
    /// Protection is not in force.
    Critical,
    /// Could not be checked.
    Unknown,
}

/// What a finding is about; one Prometheus series per kind that fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    /// A known database server or helper outside the slices it belongs in.
    Placement,
    /// A planned slice that is missing, or one bulkhead did not create.
    Slices,
    /// A directive whose control file or property differs from the plan.
    Drift,
    /// A planned directive this host does not enforce.
    NoEffect,
    /// The I/O prerequisites on the database's disks (scheduler, io.cost).
    Io,
    /// Swap as the database wants it.
    Swap,
    /// Transparent huge pages as the database wants them.
    Thp,
    /// Huge page pools and io.cost lines as planned.
    Hugepages,
    /// What this run could not read (the plan, other users' processes, bulkhead's marks).
    Access,
}

impl Area {
    pub const ALL: [Area; 9] = [
        Area::Placement,
        Area::Slices,
        Area::Drift,
        Area::NoEffect,
        Area::Io,
        Area::Swap,
        Area::Thp,
        Area::Hugepages,
        Area::Access,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Area::Placement => "placement",
            Area::Slices => "slices",
            Area::Drift => "drift",
            Area::NoEffect => "no_effect",
            Area::Io => "io",
            Area::Swap => "swap",
            Area::Thp => "thp",
            Area::Hugepages => "hugepages",
            Area::Access => "access",
        }
    }
}

/// One thing `check` found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    pub area: Area,
    pub level: Level,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Where the plan accepts this finding (`[check] accept`, `plan.toml:12:1`): a warning
    /// the operator acknowledged for this host, counted as ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted: Option<String>,
}

impl Finding {
    pub fn new(area: Area, level: Level, message: impl Into<String>) -> Finding {
        Finding {
            area,
            level,
            message: message.into(),
            hint: None,
            accepted: None,
        }
    }

    pub fn hint(mut self, h: impl Into<String>) -> Finding {
        self.hint = Some(h.into());
        self
    }
}

/// The verdict, with the exit codes of the monitoring plugin convention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// 0 OK: everything checked is as planned.
    Protected,
    /// 1 WARNING: protection is in force but weaker than planned.
    Degraded,
    /// 2 CRITICAL: the database is not protected.
    NotProtected,
    /// 3 UNKNOWN: something needed to tell could not be read.
    Unknown,
}

impl State {
    pub const ALL: [State; 4] = [
        State::Protected,
        State::Degraded,
        State::NotProtected,
        State::Unknown,
    ];

    /// The exit code (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).
    pub fn exit_code(self) -> i32 {
        match self {
            State::Protected => 0,
            State::Degraded => 1,
            State::NotProtected => 2,
            State::Unknown => 3,
        }
    }

    /// The word of the summary line.
    pub fn label(self) -> &'static str {
        match self {
            State::Protected => "PROTECTED",
            State::Degraded => "DEGRADED",
            State::NotProtected => "NOT PROTECTED",
            State::Unknown => "UNKNOWN",
        }
    }

    /// The `state` label value of the Prometheus gauge.
    pub fn name(self) -> &'static str {
        match self {
            State::Protected => "protected",
            State::Degraded => "degraded",
            State::NotProtected => "not_protected",
            State::Unknown => "unknown",
        }
    }
}

/// The plan's acknowledgements (`[check] accept`): a warning in an area the plan accepts
/// counts as ok, marked with where the plan accepts it. Critical and unknown findings always
/// count.
pub fn accept(findings: &mut [Finding], accepts: impl Fn(Area) -> Option<String>) {
    for f in findings.iter_mut().filter(|f| f.level == Level::Warning) {
        if let Some(at) = accepts(f.area) {
            f.level = Level::Ok;
            f.accepted = Some(at);
        }
    }
}

/// The state the findings add up to: any critical finding means not protected (a database
/// seen outside its slice is a fact even when something else could not be read); otherwise
/// anything unknown means unknown (protection not seen is never claimed); otherwise any
/// warning means degraded.
pub fn verdict(findings: &[Finding]) -> State {
    let any = |l: Level| findings.iter().any(|f| f.level == l);
    if any(Level::Critical) {
        State::NotProtected
    } else if any(Level::Unknown) {
        State::Unknown
    } else if any(Level::Warning) {
        State::Degraded
    } else {
        State::Protected
    }
}

/// `bulkhead check: NOT PROTECTED: <the first finding of the worst level> (+2 more)`; when
/// protected, `ok_line` says what was seen.
pub fn summary(state: State, findings: &[Finding], ok_line: &str) -> String {
    let level = match state {
        State::Protected => return protected(findings, ok_line),
        State::Degraded => Level::Warning,
        State::NotProtected => Level::Critical,
        State::Unknown => Level::Unknown,
    };
    let worst: Vec<&Finding> = findings.iter().filter(|f| f.level == level).collect();
    let others = findings
        .iter()
        .filter(|f| f.level != Level::Ok && f.level != level)
        .count();
    let first = worst.first().map_or("", |f| f.message.as_str());
    let mut more = Vec::new();
    if worst.len() > 1 {
        more.push(format!("{} more", worst.len() - 1));
    }
    if others > 0 {
        more.push(format!("{others} other finding(s)"));
    }
    let tail = if more.is_empty() {
        String::new()
    } else {
        format!(" (+{})", more.join(", "))
    };
    format!("bulkhead check: {}: {first}{tail}", state.label())
}

/// The PROTECTED line: what was seen, and what the plan accepts that it does not cover.
fn protected(findings: &[Finding], ok_line: &str) -> String {
    let mut areas: Vec<&str> = findings
        .iter()
        .filter(|f| f.accepted.is_some())
        .map(|f| f.area.name())
        .collect();
    areas.dedup();
    if areas.is_empty() {
        return format!("bulkhead check: PROTECTED: {ok_line}");
    }
    format!(
        "bulkhead check: PROTECTED: {ok_line}; not covered on this host, accepted in the plan: {}",
        areas.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(level: Level, m: &str) -> Finding {
        Finding::new(Area::Drift, level, m)
    }

    #[test]
    fn the_worst_finding_decides_and_critical_beats_unknown() {
        assert_eq!(verdict(&[]), State::Protected);
        assert_eq!(verdict(&[f(Level::Ok, "a")]), State::Protected);
        assert_eq!(
            verdict(&[f(Level::Ok, "a"), f(Level::Warning, "b")]),
            State::Degraded
        );
        assert_eq!(
            verdict(&[f(Level::Warning, "b"), f(Level::Unknown, "c")]),
            State::Unknown
        );
        assert_eq!(
            verdict(&[
                f(Level::Unknown, "c"),
                f(Level::Critical, "d"),
                f(Level::Warning, "b")
            ]),
            State::NotProtected
        );
    }

    #[test]
    fn exit_codes_follow_the_plugin_convention() {
        let codes: Vec<i32> = State::ALL.iter().map(|s| s.exit_code()).collect();
        assert_eq!(codes, [0, 1, 2, 3]);
    }

    #[test]
    fn the_summary_names_the_first_worst_finding_and_counts_the_rest() {
        let fs = [
            f(Level::Warning, "drift: cpu.shares"),
            f(Level::Critical, "redis-server 42 is outside db-server"),
            f(Level::Critical, "postgres 43 is outside db-server"),
            f(Level::Ok, "fine"),
        ];
        let s = summary(verdict(&fs), &fs, "unused");
        assert_eq!(
            s,
            "bulkhead check: NOT PROTECTED: redis-server 42 is outside db-server (+1 more, 1 other finding(s))"
        );
        assert_eq!(
            summary(State::Protected, &[], "2 slices as planned"),
            "bulkhead check: PROTECTED: 2 slices as planned"
        );
        let w = [f(Level::Warning, "THP is always")];
        assert_eq!(
            summary(verdict(&w), &w, ""),
            "bulkhead check: DEGRADED: THP is always"
        );
    }
}
