//! v2 controllers bulkhead enabled on cgroups it did not create (the hierarchy's root, a
//! delegated parent), remembered in /run so that `destroy` puts them back once nothing of
//! bulkhead's is left below.

use super::op::Op;
use std::fs;
use std::path::PathBuf;

/// (cgroup, controller) pairs, one `controller path` line each.
pub fn load() -> Vec<(PathBuf, String)> {
    fs::read_to_string(bulkhead_sys::paths::enabled_controllers_file())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (c, d) = l.split_once(' ')?;
            Some((PathBuf::from(d), c.to_string()))
        })
        // Cgroups removed since (a benchmark's root, say) need no bookkeeping.
        .filter(|(d, _)| d.is_dir())
        .collect()
}

fn save(entries: &[(PathBuf, String)]) {
    let f = bulkhead_sys::paths::enabled_controllers_file();
    if entries.is_empty() {
        let _ = fs::remove_file(&f);
        return;
    }
    let _ = fs::create_dir_all(bulkhead_sys::paths::runtime_dir());
    let text: String = entries
        .iter()
        .map(|(d, c)| format!("{c} {}\n", d.display()))
        .collect();
    let _ = fs::write(f, text);
}

/// Update the record after `ops` were carried out: foreign enables are added, foreign
/// disables removed.
pub fn record(ops: &[&Op]) {
    let mut changed = false;
    let mut state = load();
    for op in ops {
        match *op {
            Op::Enable {
                dir,
                controller,
                foreign: true,
            } => {
                let e = (dir.clone(), controller.clone());
                if !state.contains(&e) {
                    state.push(e);
                }
                changed = true;
            }
            Op::Disable {
                dir,
                controller,
                foreign: true,
            } => {
                state.retain(|(d, c)| !(d == dir && c == controller));
                changed = true;
            }
            _ => {}
        }
    }
    if changed {
        save(&state);
    }
}
