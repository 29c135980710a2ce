//! The sandbox's init shows no host path or argument: it is a copy of bulkhead's process, so
//! its argument area (`/proc/1/cmdline` inside the sandbox) still holds the host's
//! `bulkhead spawn ...` command line and its environment area the host's environment. The
//! init blanks both and names itself `bulkhead-init`, as setproctitle(3) does.

use std::ffi::CStr;

/// Where the kernel reads `/proc/PID/cmdline` and `/proc/PID/environ` from: this process's
/// argument and environment areas (`/proc/self/stat` fields 48 to 51), read before the clone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Areas {
    pub(super) arg: (usize, usize),
    pub(super) env: (usize, usize),
}

impl Areas {
    /// This process's areas, or None where /proc cannot say (then nothing is blanked and
    /// the caller refuses to start: a host command line must not leak silently).
    pub(super) fn of_self() -> Option<Areas> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        parse_stat(&stat)
    }
}

/// Fields 48 to 51 of a `/proc/PID/stat` line. The command name (field 2) may hold spaces
/// and parentheses, so fields are counted from the last ')'.
fn parse_stat(stat: &str) -> Option<Areas> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the ')'.
    let f: Vec<usize> = rest
        .split_ascii_whitespace()
        .skip(48 - 3)
        .take(4)
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    let areas = Areas {
        arg: (*f.first()?, *f.get(1)?),
        env: (*f.get(2)?, *f.get(3)?),
    };
    let sane = |(a, b): (usize, usize)| a > 0 && a <= b;
    (sane(areas.arg) && sane(areas.env)).then_some(areas)
}

/// In the forked child that becomes the sandbox's PID 1, before it forks the command: zero
/// the argument and environment areas, write `title` at the start of the argument area and
/// end the area after it where the kernel allows (PR_SET_MM needs CAP_SYS_RESOURCE in the
/// host's user namespace: not with `--private-users`, where the blanked area reads as the
/// title followed by NUL bytes). Also sets the command name (`/proc/1/comm`).
pub(super) fn hide_host_command_line(a: Areas, title: &CStr) {
    let t = title.to_bytes_with_nul();
    let arg_len = a.arg.1 - a.arg.0;
    // SAFETY: the areas are this process's own argument and environment strings (read from
    // /proc/self/stat before the fork; a fork keeps the layout), mapped and writable for
    // their whole length; the child is single-threaded and nothing reads them afterwards
    // (the command's argv and environment are the Program's own buffers). The title is
    // copied only as far as the argument area reaches.
    unsafe {
        std::ptr::write_bytes(a.env.0 as *mut u8, 0, a.env.1 - a.env.0);
        std::ptr::write_bytes(a.arg.0 as *mut u8, 0, arg_len);
        let n = t.len().min(arg_len);
        std::ptr::copy_nonoverlapping(t.as_ptr(), a.arg.0 as *mut u8, n);
        if n == t.len() {
            // Best effort: where refused, the blanked area stands.
            libc::prctl(
                libc::PR_SET_MM,
                libc::PR_SET_MM_ARG_END as libc::c_ulong,
                (a.arg.0 + n) as libc::c_ulong,
                0,
                0,
            );
        }
        libc::prctl(libc::PR_SET_NAME, title.as_ptr());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_last_parenthesis() {
        // A command name with spaces and a ')' of its own.
        let mut line = String::from("42 (a) b) S");
        for i in 4..=52 {
            line.push_str(&format!(" {i}"));
        }
        let a = parse_stat(&line).unwrap();
        assert_eq!(a.arg, (48, 49));
        assert_eq!(a.env, (50, 51));
    }

    #[test]
    fn short_or_empty_lines_give_none() {
        assert_eq!(parse_stat("42 (x) S 1 2 3"), None);
        assert_eq!(parse_stat(""), None);
        let mut zeros = String::from("42 (x) S");
        for _ in 4..=52 {
            zeros.push_str(" 0");
        }
        assert_eq!(parse_stat(&zeros), None);
    }

    #[test]
    fn this_process_has_areas() {
        let a = Areas::of_self().unwrap();
        let first = std::env::args_os().next().unwrap();
        // SAFETY: reading this process's own argument area, mapped for its whole length.
        let arg0 = unsafe { CStr::from_ptr(a.arg.0 as *const libc::c_char) };
        assert_eq!(arg0.to_bytes(), first.as_encoded_bytes());
    }
}
