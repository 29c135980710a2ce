//! Monitoring agents in an idle-class slice. An agent that must answer on time (a scrape,
//! a health probe) gets almost no CPU in a `CPUWeight=idle` slice while the server keeps the
//! CPUs busy: its answers wait seconds and the monitoring raises false alarms (ScyllaDB moved
//! node_exporter out of a CPUWeight=10 helper slice for this). Pure: the front door passes the
//! placements and which slices are idle-class.

use super::placement::{Expected, Role};
use super::verdict::{Area, Finding, Level};

/// A warning for each kind of monitoring agent that runs inside a slice among `idle`.
pub fn starved(items: &[Expected], idle: &[String]) -> Vec<Finding> {
    items
        .iter()
        .filter(|e| e.role == Role::Monitor && !e.inside.is_empty())
        .filter_map(|e| {
            let slice = e.slices.iter().find(|s| idle.contains(s))?;
            Some(
                Finding::new(
                    Area::Placement,
                    Level::Warning,
                    format!(
                        "{}: {} process(es) in {slice}, whose CPUWeight is idle: while the \
                         server keeps the CPUs busy its answers wait seconds (scrapes time \
                         out, false InstanceDown alerts)",
                        e.what,
                        e.inside.len()
                    ),
                )
                .hint(
                    "give monitoring agents a slice with a CPU weight and a cap, as the \
                     embedded default's db-monitor (CPUWeight=100, CPUQuota=50%, \
                     MemoryMax=512M), and place them there: bulkhead move --tree --slice \
                     db-monitor PID",
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(slices: &[&str], inside: &[u32]) -> Expected {
        Expected {
            what: "monitoring agent node_exporter".into(),
            role: Role::Monitor,
            slices: slices.iter().map(|s| s.to_string()).collect(),
            inside: inside.to_vec(),
            outside: vec![],
        }
    }

    #[test]
    fn an_agent_in_an_idle_slice_is_a_warning_with_the_way_out() {
        let idle = vec!["db-helper".to_string()];
        let f = starved(&[agent(&["db-helper"], &[7])], &idle);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].level, Level::Warning);
        assert!(f[0]
            .message
            .contains("in db-helper, whose CPUWeight is idle"));
        assert!(f[0].hint.as_deref().unwrap().contains("db-monitor"));
    }

    #[test]
    fn an_agent_with_a_weight_or_not_running_is_no_finding() {
        let idle = vec!["db-helper".to_string()];
        assert!(starved(&[agent(&["db-monitor"], &[7])], &idle).is_empty());
        assert!(starved(&[agent(&["db-helper"], &[])], &idle).is_empty());
        let mut helper = agent(&["db-helper"], &[7]);
        helper.role = Role::Helper;
        assert!(starved(&[helper], &idle).is_empty());
    }
}
