//! v2 controllers bulkhead enabled on cgroups it did not create (the hierarchy's root, a
//! delegated parent), remembered in /run so that `destroy` puts them back once nothing of
//! bulkhead's is left below.

use std::fs;
use std::path::{Path, PathBuf};

/// A change to a controller on a cgroup bulkhead did not create, as carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    /// `controller` was enabled for the children of `dir`.
    Enabled { dir: &'a Path, controller: &'a str },
    /// `controller` was disabled for the children of `dir`.
    Disabled { dir: &'a Path, controller: &'a str },
}

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

/// Forget the entries `pick` chooses (a test forgetting the scratch cgroups it removed), and
/// those of cgroups that are gone.
pub fn forget(pick: impl Fn(&Path, &str) -> bool) {
    let mut state = load();
    state.retain(|(d, c)| !pick(d, c));
    save(&state);
}

/// Update the record after `changes` were carried out: foreign enables are added, foreign
/// disables removed.
pub fn record<'a>(changes: impl IntoIterator<Item = Change<'a>>) {
    let mut changed = false;
    let mut state = load();
    for change in changes {
        match change {
            Change::Enabled { dir, controller } => {
                let e = (dir.to_path_buf(), controller.to_string());
                if !state.contains(&e) {
                    state.push(e);
                }
            }
            Change::Disabled { dir, controller } => {
                state.retain(|(d, c)| !(d == dir && c == controller));
            }
        }
        changed = true;
    }
    if changed {
        save(&state);
    }
}
