//! The `Slice=` drop-in of each service the plan names (`services = [...]` in a slice):
//! `/etc/systemd/system/UNIT.d/50-bulkhead-slice.conf`, with the ordering on
//! `bulkhead-apply.service` that the slices need at boot.

use super::{UnitFile, HEADER};
use bulkhead_plan::{Plan, SliceName};
use std::path::{Path, PathBuf};

/// The drop-in's file name in `UNIT.d/`.
pub const SLICE_DROP_IN: &str = "50-bulkhead-slice.conf";

/// The drop-in that puts `service` in `slice`.
pub fn drop_in(service: &str, slice: &SliceName) -> UnitFile {
    let slice_unit = slice.unit();
    UnitFile {
        path: PathBuf::from(format!("{service}.d")).join(SLICE_DROP_IN),
        text: format!(
            "{HEADER}: the plan puts {service} in {slice_unit}.\n\
             # It moves there when it (re)starts; `bulkhead destroy` removes this file.\n\
             \n[Unit]\nWants=bulkhead-apply.service\nAfter=bulkhead-apply.service\n\
             \n[Service]\nSlice={slice_unit}\n"
        ),
    }
}

/// The drop-ins of every service of the plan.
pub fn drop_ins(plan: &Plan) -> Vec<UnitFile> {
    bulkhead_plan::services::of_plan(plan)
        .iter()
        .map(|(service, slice)| drop_in(service, slice))
        .collect()
}

/// The slice unit a drop-in bulkhead wrote names (its `Slice=` line).
pub fn slice_of(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("Slice="))
}

/// The service drop-ins bulkhead wrote in `dir`: (path, the slice unit it names). Bounded
/// by the directory (a unit directory holds thousands of entries at most).
pub fn written(dir: &Path) -> Vec<(PathBuf, String)> {
    let Ok(names) = bulkhead_sys::statefile::names(dir) else {
        return Vec::new();
    };
    names
        .iter()
        .filter_map(|n| n.to_str())
        .filter(|n| n.ends_with(".service.d"))
        .filter_map(|n| {
            let path = dir.join(n).join(SLICE_DROP_IN);
            let text = bulkhead_sys::statefile::read_string(&path, 64 << 10).ok()?;
            let slice = slice_of(&text).filter(|_| text.starts_with(HEADER))?;
            Some((path, slice.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_says_slice_and_ordering() {
        let f = drop_in(
            "postgresql@15-main.service",
            &SliceName::parse("db-server").unwrap(),
        );
        assert_eq!(
            f.path,
            PathBuf::from("postgresql@15-main.service.d/50-bulkhead-slice.conf")
        );
        assert!(f.text.starts_with(HEADER));
        assert!(
            f.text.contains("\n[Service]\nSlice=db-server.slice\n"),
            "{}",
            f.text
        );
        assert!(f.text.contains("After=bulkhead-apply.service"));
        assert_eq!(slice_of(&f.text), Some("db-server.slice"));
    }
}
