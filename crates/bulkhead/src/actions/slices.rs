//! Slice names from the command line, and the explanation when one does not exist: not in
//! the plan (with the nearest known name), or in the plan but not applied yet.

use super::Context;
use bulkhead_cgroups::Placement;
use bulkhead_plan::SliceName;
use bulkhead_sys::error::{Diagnostic, Error, Result};

/// A slice name as given with `--slice`.
pub fn parse_slice(s: &str) -> Result<SliceName> {
    SliceName::parse(s)
        .map_err(|m| Error::invalid(Diagnostic::error(format!("invalid slice name: {m}"))))
}

/// The slice must exist; otherwise say whether the plan has it (then: apply) or not.
pub fn require_slice(cx: &Context, placement: &dyn Placement, name: &SliceName) -> Result<()> {
    if placement.slice_exists(name) {
        return Ok(());
    }
    Err(missing_slice(cx, placement, name))
}

/// Why `name` is not there, and what to do.
pub fn missing_slice(cx: &Context, placement: &dyn Placement, name: &SliceName) -> Error {
    let plan = cx.load_plan().ok();
    let in_plan = plan.as_ref().is_some_and(|p| p.slices.contains_key(name));
    let d = if in_plan {
        Diagnostic::error(format!(
            "slice '{name}' is in the plan but does not exist yet"
        ))
        .hint("create it first: bulkhead apply")
    } else {
        let mut known: Vec<String> = placement.slices().iter().map(|s| s.to_string()).collect();
        if let Some(p) = &plan {
            for n in p.slices.keys() {
                if !known.contains(&n.to_string()) {
                    known.push(n.to_string());
                }
            }
        }
        let hint = if known.is_empty() {
            "no slices exist; define them in the plan and run bulkhead apply".to_string()
        } else {
            let nearest = bulkhead_plan::nearest(name.as_str(), &known)
                .map(|k| format!("did you mean {k}? "))
                .unwrap_or_default();
            format!("{nearest}known slices: {}", known.join(", "))
        };
        Diagnostic::error(format!("unknown slice '{name}'")).hint(hint)
    };
    Error::invalid(d)
}
