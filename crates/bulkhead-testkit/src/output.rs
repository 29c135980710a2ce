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

/// Runs a command to its end and asserts that it succeeded, showing its stderr when not.
#[track_caller]
pub fn ok(cmd: &mut std::process::Command) -> Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{:?}: {e}", cmd.get_program()));
    assert!(
        o.status.success(),
        "{:?} {:?} exited with {}: {}",
        cmd.get_program(),
        cmd.get_args().collect::<Vec<_>>(),
        o.status,
        stderr(&o)
    );
    o
}

/// The first line a child prints on its piped stdout (what it says once it is ready), with
/// its newline.
#[track_caller]
pub fn first_line(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let out = child.stdout.as_mut().expect("the child's stdout is piped");
    let mut line = String::new();
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .expect("read the child's stdout");
    line
}
