//! Slice names, nested the way systemd nests them: `db-server` is a child of `db`, and its
//! cgroup path is `db.slice/db-server.slice`.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(into = "String")]
pub struct SliceName(String);

impl SliceName {
    /// Accepts `db-server` or `db-server.slice`.
    pub fn parse(s: &str) -> Result<SliceName, String> {
        let bare = s.strip_suffix(".slice").unwrap_or(s);
        if bare.is_empty() {
            return Err("a slice name must not be empty".into());
        }
        if bare == "-" {
            return Err(
                "'-.slice' is systemd's root slice; bulkhead's slices live below it".into(),
            );
        }
        if bare.contains('/') {
            return Err(format!(
                "'{s}' contains '/': slice names nest with '-' (db-server is inside db), not with '/'"
            ));
        }
        if bare.contains("..") {
            return Err(format!(
                "'{s}' contains '..', which is not allowed in a slice name"
            ));
        }
        if bare.starts_with('-') || bare.ends_with('-') || bare.contains("--") {
            return Err(format!(
                "'{s}' has an empty part: every '-' must separate two non-empty names (like db-server)"
            ));
        }
        if bare.starts_with('.') {
            return Err(format!("'{s}' must not start with '.'"));
        }
        if let Some(c) = bare
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.' | '\\')))
        {
            return Err(format!(
                "'{s}' contains '{c}': slice names may use letters, digits, '-', '_', ':', '.' and systemd's \\xNN escapes"
            ));
        }
        if !escapes_are_well_formed(bare) {
            return Err(format!(
                "'{s}' has a '\\' that is not a systemd escape: write \\x followed by two hex digits (a '-' inside one level is \\x2d, as systemd-escape writes it)"
            ));
        }
        if bare.len() + ".slice".len() > 255 {
            return Err(format!(
                "'{s}' is longer than systemd's 255-character limit"
            ));
        }
        Ok(SliceName(bare.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The systemd unit name, `db-server.slice`.
    pub fn unit(&self) -> String {
        format!("{}.slice", self.0)
    }

    /// The name as a TOML key: bare (`db-server`), or a literal string when it has a `.`,
    /// `:` or an escape (`'system-systemd\x2dcryptsetup'`: the backslash stays as written).
    pub fn toml_key(&self) -> String {
        if self
            .0
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            self.0.clone()
        } else {
            format!("'{}'", self.0)
        }
    }

    /// The parent slice (`db` for `db-server`), `None` for a top-level slice.
    pub fn parent(&self) -> Option<SliceName> {
        self.0
            .rfind('-')
            .map(|i| SliceName(self.0[..i].to_string()))
    }

    /// `db`, `db-server`, ... from the top down, ending with self.
    pub fn lineage(&self) -> Vec<SliceName> {
        let mut out = vec![self.clone()];
        let mut cur = self.parent();
        while let Some(p) = cur {
            cur = p.parent();
            out.push(p);
        }
        out.reverse();
        out
    }

    pub fn depth(&self) -> usize {
        self.0.matches('-').count()
    }

    /// The cgroup path below the cgroup root: `db.slice/db-server.slice`.
    pub fn cgroup_path(&self) -> PathBuf {
        self.lineage().iter().map(|n| n.unit()).collect()
    }
}

/// Every `\` starts a `\xNN` escape (systemd-escape's form: `\x2d` is a `-` inside one
/// level, so `system-systemd\x2dcryptsetup` is a child of `system`).
fn escapes_are_well_formed(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let ok = b.len() >= i + 4
                && b[i + 1] == b'x'
                && b[i + 2].is_ascii_hexdigit()
                && b[i + 3].is_ascii_hexdigit();
            if !ok {
                return false;
            }
            i += 4;
        } else {
            i += 1;
        }
    }
    true
}

impl fmt::Display for SliceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<SliceName> for String {
    fn from(n: SliceName) -> String {
        n.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_follows_systemd() {
        let n = SliceName::parse("db-server.slice").unwrap();
        assert_eq!(n.as_str(), "db-server");
        assert_eq!(n.parent().unwrap().as_str(), "db");
        assert_eq!(n.cgroup_path(), PathBuf::from("db.slice/db-server.slice"));
        let deep = SliceName::parse("a-b-c").unwrap();
        assert_eq!(
            deep.cgroup_path(),
            PathBuf::from("a.slice/a-b.slice/a-b-c.slice")
        );
        assert_eq!(deep.depth(), 2);
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in [
            "", "a/b", "..", "a..b", "-a", "a-", "a--b", "a b", "-", ".hidden",
        ] {
            assert!(SliceName::parse(bad).is_err(), "{bad} should be refused");
        }
        assert!(SliceName::parse("db-helper").is_ok());
        for bad in ["a\\b", "a\\x2", "a\\x2g", "a\\"] {
            assert!(SliceName::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn systemd_escapes_stay_inside_one_level() {
        // systemd's own unit: a '-' inside a level is \x2d, so only real dashes nest.
        let n = SliceName::parse("system-systemd\\x2dcryptsetup.slice").unwrap();
        assert_eq!(n.parent().unwrap().as_str(), "system");
        assert_eq!(n.depth(), 1);
        assert_eq!(
            n.cgroup_path(),
            PathBuf::from("system.slice/system-systemd\\x2dcryptsetup.slice")
        );
        assert_eq!(n.unit(), "system-systemd\\x2dcryptsetup.slice");
        assert_eq!(n.toml_key(), "'system-systemd\\x2dcryptsetup'");
        assert_eq!(SliceName::parse("db-a_b").unwrap().toml_key(), "db-a_b");
    }
}
