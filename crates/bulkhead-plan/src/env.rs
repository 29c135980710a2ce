//! Environment settings as systemd takes them: `KEY=VALUE` assignments and EnvironmentFile=
//! files.

use bulkhead_sys::error::{errno_text, Diagnostic, Error, Result};
use std::path::Path;

/// Parse `KEY=VALUE` from the command line.
pub fn parse_env_assignment(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if valid_env_name(k) => Ok((k.to_string(), v.to_string())),
        _ => Err(format!(
            "'{s}' is not KEY=VALUE (KEY: letters, digits and _, not starting with a digit)"
        )),
    }
}

fn valid_env_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Read an environment file the way systemd's EnvironmentFile= does: `KEY=VALUE` lines,
/// `#` and `;` comments, optional quotes, an optional leading `export`.
pub fn read_env_file(path: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid(
            Diagnostic::error(format!(
                "cannot read the environment file: {}",
                errno_text(&e)
            ))
            .at(path.display().to_string()),
        )
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        let t = t.strip_prefix("export ").unwrap_or(t);
        let Some((k, v)) = t.split_once('=') else {
            return Err(Error::invalid(
                Diagnostic::error(format!("'{t}' is not KEY=VALUE")).at(format!(
                    "{}:{}",
                    path.display(),
                    i + 1
                )),
            ));
        };
        let k = k.trim();
        if !valid_env_name(k) {
            return Err(Error::invalid(
                Diagnostic::error(format!("'{k}' is not a valid variable name")).at(format!(
                    "{}:{}",
                    path.display(),
                    i + 1
                )),
            ));
        }
        let v = v.trim();
        let v = if v.len() >= 2
            && ((v.starts_with('"') && v.ends_with('"'))
                || (v.starts_with('\'') && v.ends_with('\'')))
        {
            &v[1..v.len() - 1]
        } else {
            v
        };
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments() {
        assert_eq!(
            parse_env_assignment("A_1=x=y").unwrap(),
            ("A_1".to_string(), "x=y".to_string())
        );
        assert!(parse_env_assignment("1A=x").is_err());
        assert!(parse_env_assignment("novalue").is_err());
    }
}
