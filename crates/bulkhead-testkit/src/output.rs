//! A finished command's output as text.

use std::process::Output;

/// Its standard output (invalid UTF-8 replaced).
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Its standard error (invalid UTF-8 replaced).
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that `text` contains `want`, showing the whole text when it does not.
#[track_caller]
pub fn assert_has(text: &str, want: &str) {
    assert!(text.contains(want), "expected {want:?} in:\n{text}");
}
