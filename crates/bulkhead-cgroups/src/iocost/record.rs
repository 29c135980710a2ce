//! What io.cost's root files held before bulkhead first changed a disk's line, so `destroy`
//! can put it back: `/run/bulkhead/iocost.json` (`BULKHEAD_IOCOST_STATE` moves it). Like the
//! settings themselves it does not survive a reboot. Each entry is written before the change
//! it records, so a bulkhead killed halfway still leaves a complete record.

use bulkhead_sys::error::{io_failed, Diagnostic, Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const STATE_ENV: &str = "BULKHEAD_IOCOST_STATE";

pub fn default_path() -> PathBuf {
    match std::env::var_os(STATE_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => bulkhead_sys::paths::runtime_dir().join("iocost.json"),
    }
}

/// Root file -> disk (`MAJ:MIN`) -> the line before bulkhead's first write (None: the kernel
/// did not list the disk, io.cost had never been set up on it).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub files: BTreeMap<PathBuf, BTreeMap<String, Option<String>>>,
}

impl Record {
    pub fn is_empty(&self) -> bool {
        self.files.values().all(BTreeMap::is_empty)
    }

    /// Read the record; a missing file is an empty record.
    pub fn load(path: &Path) -> Result<Record> {
        match std::fs::read_to_string(path) {
            Ok(t) => serde_json::from_str(&t).map_err(|e| {
                Error::failed_with(
                    Diagnostic::error(format!(
                        "the io.cost record is damaged ({e}); it says what `destroy` puts back"
                    ))
                    .at(path.display().to_string())
                    .hint("look at it and fix it by hand, or remove it to forget what bulkhead changed"),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(e) => Err(io_failed("cannot read", path, e)),
        }
    }

    /// Write the record (atomically); an empty record removes the file.
    pub fn save(&self, path: &Path) -> Result<()> {
        if self.is_empty() {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(io_failed("cannot remove", path, e))
                }
                _ => Ok(()),
            };
        }
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| io_failed("cannot create", d, e))?;
        }
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| io_failed("cannot write", path, e))
    }

    /// Remember `was` as the original of `dev` in `file`, unless an earlier change did.
    pub fn remember(&mut self, file: &Path, dev: &str, was: Option<&str>) -> bool {
        let m = self.files.entry(file.to_path_buf()).or_default();
        if m.contains_key(dev) {
            return false;
        }
        m.insert(dev.to_string(), was.map(str::to_string));
        true
    }

    pub fn forget(&mut self, file: &Path, dev: &str) {
        if let Some(m) = self.files.get_mut(file) {
            m.remove(dev);
        }
        self.files.retain(|_, m| !m.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_value_wins_and_empty_removes() {
        let p =
            std::env::temp_dir().join(format!("bulkhead-iocost-rec-{}.json", std::process::id()));
        let f = Path::new("/sys/fs/cgroup/io.cost.qos");
        let mut r = Record::default();
        assert!(r.remember(f, "8:0", None));
        assert!(!r.remember(f, "8:0", Some("enable=1 ctrl=auto")));
        assert!(r.remember(f, "8:16", Some("enable=0 ctrl=auto")));
        r.save(&p).unwrap();
        let back = Record::load(&p).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.files[f]["8:0"], None);
        let mut empty = back.clone();
        empty.forget(f, "8:0");
        empty.forget(f, "8:16");
        assert!(empty.is_empty());
        empty.save(&p).unwrap();
        assert!(!p.exists());
        std::fs::write(&p, "{not json").unwrap();
        assert!(Record::load(&p)
            .unwrap_err()
            .to_string()
            .contains("damaged"));
        let _ = std::fs::remove_file(&p);
    }
}
