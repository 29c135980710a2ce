//! A BulkheadPlan's spec as plan-file TOML, parsed by bulkhead_plan's own parser: one
//! validation path, so the resource cannot accept what the plan file refuses. The resource
//! is untrusted input: sizes are bounded, and every problem is a message, never a panic.

use crate::crd::BulkheadPlanSpec;
use bulkhead::plan::Plan;
use std::collections::BTreeMap;
use std::path::Path;

/// Slices in one plan.
pub const MAX_SLICES: usize = 128;
/// Directives (or keys of a section) in one slice or section.
pub const MAX_KEYS: usize = 64;
/// Nesting of a value (a table of tables of lists...).
pub const MAX_DEPTH: usize = 4;
/// Elements of one list or table value.
pub const MAX_ITEMS: usize = 256;
/// Length of one string or key.
pub const MAX_STRING: usize = 4096;
/// The TOML text.
pub const MAX_TEXT: usize = 256 * 1024;

/// First-level slice names the agent never makes: the kubelet's pod cgroups and its own.
pub const RESERVED: [&str; 2] = ["kubepods", "kubelet"];

/// The spec as plan-file TOML.
pub fn to_toml(spec: &BulkheadPlanSpec) -> Result<String, String> {
    if spec.slices.len() > MAX_SLICES {
        return Err(format!(
            "{} slices; a plan has at most {MAX_SLICES}",
            spec.slices.len()
        ));
    }
    let mut root = toml::Table::new();
    let mut slices = toml::Table::new();
    for (name, dirs) in &spec.slices {
        check_key(name, "slice name")?;
        slices.insert(name.clone(), section(dirs, &format!("slice {name}"))?);
    }
    if !slices.is_empty() {
        root.insert("slice".into(), toml::Value::Table(slices));
    }
    if let Some(h) = &spec.hugepages {
        root.insert("hugepages".into(), section(h, "hugepages")?);
    }
    if let Some(g) = &spec.guard {
        root.insert("guard".into(), section(g, "guard")?);
    }
    let text = toml::to_string(&root).map_err(|e| format!("cannot write the plan as TOML: {e}"))?;
    if text.len() > MAX_TEXT {
        return Err(format!(
            "the plan is {} bytes as TOML; at most {MAX_TEXT}",
            text.len()
        ));
    }
    Ok(text)
}

/// Parse the spec with the plan file's parser; `name` labels messages. Slices whose first
/// level is the kubelet's (`kubepods`, `kubelet`) are refused.
pub fn to_plan(name: &str, spec: &BulkheadPlanSpec) -> Result<(String, Plan), String> {
    let text = to_toml(spec)?;
    let label = format!("BulkheadPlan {name}");
    let plan = Plan::parse(&text, Some(Path::new(&label))).map_err(|e| {
        e.diagnostics()
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    for s in plan.slices.keys() {
        let first = s.as_str().split('-').next().unwrap_or_default();
        if RESERVED.iter().any(|r| first.eq_ignore_ascii_case(r)) {
            return Err(format!(
                "slice {s}: {first}.slice belongs to the kubelet; the agent never touches it"
            ));
        }
    }
    Ok((text, plan))
}

fn check_key(k: &str, what: &str) -> Result<(), String> {
    if k.is_empty() || k.len() > MAX_STRING {
        return Err(format!("a {what} must have 1 to {MAX_STRING} characters"));
    }
    Ok(())
}

fn section(m: &BTreeMap<String, serde_json::Value>, what: &str) -> Result<toml::Value, String> {
    if m.len() > MAX_KEYS {
        return Err(format!("{what}: {} keys; at most {MAX_KEYS}", m.len()));
    }
    let mut t = toml::Table::new();
    for (k, v) in m {
        check_key(k, "key")?;
        t.insert(
            k.clone(),
            value(v, 1).map_err(|e| format!("{what}: {k}: {e}"))?,
        );
    }
    Ok(toml::Value::Table(t))
}

fn value(v: &serde_json::Value, depth: usize) -> Result<toml::Value, String> {
    use serde_json::Value as J;
    if depth > MAX_DEPTH {
        return Err(format!("values nest at most {MAX_DEPTH} deep"));
    }
    Ok(match v {
        J::Null => return Err("null is not a value".into()),
        J::Bool(b) => toml::Value::Boolean(*b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                toml::Value::Integer(i)
            } else if let Some(f) = n.as_f64().filter(|f| f.is_finite() && n.is_f64()) {
                toml::Value::Float(f)
            } else {
                return Err(format!("{n} is out of range"));
            }
        }
        J::String(s) => {
            if s.len() > MAX_STRING {
                return Err(format!(
                    "a string of {} bytes; at most {MAX_STRING}",
                    s.len()
                ));
            }
            toml::Value::String(s.clone())
        }
        J::Array(a) => {
            if a.len() > MAX_ITEMS {
                return Err(format!("a list of {}; at most {MAX_ITEMS}", a.len()));
            }
            toml::Value::Array(
                a.iter()
                    .map(|i| value(i, depth + 1))
                    .collect::<Result<_, _>>()?,
            )
        }
        J::Object(o) => {
            if o.len() > MAX_ITEMS {
                return Err(format!("a table of {}; at most {MAX_ITEMS}", o.len()));
            }
            let mut t = toml::Table::new();
            for (k, i) in o {
                check_key(k, "key")?;
                t.insert(k.clone(), value(i, depth + 1)?);
            }
            toml::Value::Table(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> BulkheadPlanSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn plan_file_values_round_trip() {
        let s = spec(json!({
            "slices": {
                "db": {"Description": "databases"},
                "db-server": {"CPUWeight": 1000, "MemorySwapMax": 0},
                "db-helper": {"CPUWeight": "idle", "MemoryHigh": {"value": "4%", "min": "1200M"},
                              "IODeviceWeight": ["/dev/null 10"]},
                "db-pg\\x2dbackup": {"TasksMax": 100}
            },
            "hugepages": {"pools": {"2M": 0}, "thp": "madvise"},
            "guard": {"protect": "db-server", "sideloads": ["db-helper"]}
        }));
        let (text, plan) = to_plan("t", &s).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.slices.len(), 4, "{text}");
        assert!(plan.hugepages.is_some());
        assert!(plan.guard.is_some());
        let helper = plan
            .slices
            .keys()
            .find(|n| n.as_str() == "db-helper")
            .unwrap();
        let d = &plan.slices[helper].directives;
        assert!(d.contains_key("MemoryHigh") && d.contains_key("CPUWeight"));
    }

    #[test]
    fn the_parser_says_what_is_wrong() {
        let s = spec(json!({"slices": {"db": {"CPUWieght": 10}}}));
        let e = to_plan("bad", &s).unwrap_err();
        assert!(e.contains("CPUWieght"), "{e}");
        assert!(e.contains("BulkheadPlan bad"), "{e}");
        let s = spec(json!({"slices": {"db": {"CPUWeight": 0}}}));
        assert!(to_plan("bad", &s).is_err());
    }

    #[test]
    fn kubelet_slices_are_refused() {
        for n in [
            "kubepods",
            "kubepods-burstable",
            "Kubelet",
            "kubepods-besteffort-pod1",
        ] {
            let s = spec(json!({"slices": {n: {"CPUWeight": 10}}}));
            let e = to_plan("k", &s).unwrap_err();
            assert!(e.contains("kubelet"), "{n}: {e}");
        }
        let s = spec(json!({"slices": {"kubepodsx": {"CPUWeight": 10}}}));
        assert!(to_plan("k", &s).is_ok());
    }

    #[test]
    fn sizes_are_bounded_and_nothing_panics() {
        let many: serde_json::Map<_, _> = (0..MAX_SLICES + 1)
            .map(|i| (format!("s{i}"), json!({})))
            .collect();
        let e = to_plan("big", &spec(json!({ "slices": many }))).unwrap_err();
        assert!(e.contains("at most"), "{e}");
        let deep = json!({"slices": {"db": {"MemoryMax": {"a": {"b": {"c": {"d": {"e": 1}}}}}}}});
        assert!(to_plan("deep", &spec(deep)).is_err());
        let null = json!({"slices": {"db": {"MemoryMax": null}}});
        assert!(to_plan("null", &spec(null)).is_err());
        let huge = json!({"slices": {"db": {"Description": "x".repeat(MAX_STRING + 1)}}});
        assert!(to_plan("huge", &spec(huge)).is_err());
        for v in [
            json!(1.5),
            json!(u64::MAX),
            json!(-1),
            json!([]),
            json!({}),
            json!(true),
        ] {
            let _ = to_plan("any", &spec(json!({"slices": {"db": {"CPUWeight": v}}})));
        }
        for name in ["", "/", "..", "a/b", "-", "db--x"] {
            assert!(
                to_plan("n", &spec(json!({"slices": {name: {}}}))).is_err(),
                "{name}"
            );
        }
    }
}
