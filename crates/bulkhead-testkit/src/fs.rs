//! Scratch directories and files a test reads.

use std::path::{Path, PathBuf};

/// A directory removed (with what is in it) when the test ends, failed or not.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory `$TMPDIR/bulkhead-<tag>-<pid>-<n>`.
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let d = std::env::temp_dir().join(format!("bulkhead-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        TempDir(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file's text, trimmed; a missing file fails the test, naming it.
pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}

/// Writes `text` to a file; a failure fails the test, naming the file.
#[track_caller]
pub fn write(p: impl AsRef<Path>, text: impl AsRef<[u8]>) {
    let p = p.as_ref();
    std::fs::write(p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}
