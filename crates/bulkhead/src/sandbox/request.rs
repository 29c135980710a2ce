//! What the user asked `spawn` for, before the root, the user range and the slice are
//! resolved: the value `bulkhead spawn`'s arguments become, and the one serve's sandboxed
//! targets are described by (`activate::command` renders it back to a command line).

use super::SandboxSpec;

/// What the user asked for: the sandbox, with the root, user range and slice as given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpawnRequest {
    /// Everything but `rootfs`, `private_users` and `slice`, which are resolved here.
    pub spec: SandboxSpec,
    /// `-D`: a directory, or an image name.
    pub directory: String,
    /// `--private-users[=auto|BASE[:SIZE]]`.
    pub private_users: Option<String>,
    pub slice: Option<String>,
}
