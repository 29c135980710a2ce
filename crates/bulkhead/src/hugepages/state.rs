//! What bulkhead found before it first changed a huge page setting, so `hugepages reset` can
//! put it back: the value of every sysfs file it wrote (pool sizes, THP switches) and the
//! hugetlbfs mounts it made (with the directories it created for them).
//!
//! The record lives in `/run/bulkhead/hugepages.json` (`BULKHEAD_HUGEPAGES_STATE` overrides
//! it): like the pools themselves it does not survive a reboot. Each entry is written before
//! the change it records, so a bulkhead killed halfway still leaves a complete record.

use bulkhead_sys::error::{Diagnostic, Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The environment variable that moves the record (tests, several bulkhead instances).
pub use bulkhead_sys::paths::HUGEPAGES_STATE_ENV as STATE_ENV;

pub fn default_path() -> PathBuf {
    bulkhead_sys::paths::hugepages_state()
}

/// A hugetlbfs mount bulkhead made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedMount {
    pub path: PathBuf,
    /// Directories bulkhead created for it, outermost first.
    pub created: Vec<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// sysfs file -> the value it had before bulkhead's first write.
    pub files: BTreeMap<PathBuf, String>,
    pub mounts: Vec<SavedMount>,
}

impl Saved {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.mounts.is_empty()
    }

    /// Read the record; a missing file is an empty record.
    pub fn load(path: &Path) -> Result<Saved> {
        match std::fs::read_to_string(path) {
            Ok(t) => serde_json::from_str(&t).map_err(|e| {
                Error::failed_with(
                    Diagnostic::error(format!(
                        "the huge page record is damaged ({e}); it says what `hugepages reset` restores"
                    ))
                    .at(path.display().to_string())
                    .hint("look at it and fix it by hand, or remove it to forget what bulkhead changed"),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Saved::default()),
            Err(e) => Err(bulkhead_sys::error::io_failed("cannot read", path, e)),
        }
    }

    /// Write the record (atomically); an empty record removes the file.
    pub fn save(&self, path: &Path) -> Result<()> {
        if self.is_empty() {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(bulkhead_sys::error::io_failed("cannot remove", path, e))
                }
                _ => Ok(()),
            };
        }
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)
                .map_err(|e| bulkhead_sys::error::io_failed("cannot create", d, e))?;
        }
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        bulkhead_sys::statefile::write_atomic(path, text.as_bytes(), 0o644)
            .map_err(|e| bulkhead_sys::error::io_failed("cannot write", path, e))
    }

    /// Remember `value` as the original of `file`, unless an earlier change already did.
    pub fn remember(&mut self, file: &Path, value: &str) -> bool {
        if self.files.contains_key(file) {
            return false;
        }
        self.files.insert(file.to_path_buf(), value.to_string());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_value_wins_and_empty_removes() {
        let p = std::env::temp_dir().join(format!("bulkhead-hp-state-{}.json", std::process::id()));
        let mut s = Saved::default();
        assert!(s.remember(Path::new("/sys/x"), "0"));
        assert!(!s.remember(Path::new("/sys/x"), "16"));
        s.mounts.push(SavedMount {
            path: "/mnt/h".into(),
            created: vec!["/mnt/h".into()],
        });
        s.save(&p).unwrap();
        let back = Saved::load(&p).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.files[Path::new("/sys/x")], "0");
        Saved::default().save(&p).unwrap();
        assert!(!p.exists());
        assert!(Saved::load(&p).unwrap().is_empty());
        std::fs::write(&p, "{not json").unwrap();
        assert!(Saved::load(&p).unwrap_err().to_string().contains("damaged"));
        let _ = std::fs::remove_file(&p);
    }
}
