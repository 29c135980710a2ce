//! Plan values written back as TOML text (`import`, `export`'s [X-Bulkhead]).

/// `s` as a TOML basic string: quoted, with JSON's escapes (which TOML reads the same).
pub fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}
