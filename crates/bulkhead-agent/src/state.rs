//! What the agent made on this node, kept in a small file (default
//! /run/bulkhead/agent/state.json) so that it removes only that, also after a restart.

use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The BulkheadPlan applied last, and its generation.
    pub plan: Option<String>,
    pub generation: Option<i64>,
    /// Slices the agent created (they did not exist before its first apply), parents first.
    pub created: Vec<String>,
}

/// The largest state file read (a bigger one is refused as damaged).
const MAX_BYTES: u64 = 1 << 20;

impl State {
    /// Read the state; a missing file is an empty state.
    pub fn load(path: &Path) -> Result<State, String> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
            Ok(m) if m.len() > MAX_BYTES => {
                return Err(format!("{}: larger than {MAX_BYTES} bytes", path.display()))
            }
            Ok(_) => {}
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Write it whole (a temporary file renamed over the old one).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Remember slices created now, keeping the order (parents first).
    pub fn add_created(&mut self, names: impl IntoIterator<Item = String>) {
        for n in names {
            if !self.created.contains(&n) {
                self.created.push(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing() {
        let dir = std::env::temp_dir().join(format!("bulkhead-agent-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("state.json");
        assert_eq!(State::load(&p).unwrap(), State::default());
        let mut s = State {
            plan: Some("redis".into()),
            generation: Some(2),
            created: vec![],
        };
        s.add_created(["db".to_string(), "db-server".to_string(), "db".to_string()]);
        assert_eq!(s.created, ["db", "db-server"]);
        s.save(&p).unwrap();
        assert_eq!(State::load(&p).unwrap(), s);
        std::fs::write(&p, "{not json").unwrap();
        assert!(State::load(&p).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
