//! What the user asked `spawn` for, before the root and the user range are resolved: the value `bulkhead spawn`'s arguments become, and the one serve's sandboxed
//! targets are described by (`activate::command` renders it back to a command line).

use super::SandboxSpec;

/// What the user asked for: the sandbox (its slice parsed already), with the root and the
/// user range as given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpawnRequest {
    /// Everything but `rootfs` and `private_users`, which are resolved from the two below.
    pub spec: SandboxSpec,
    /// `-D`: a directory, or an image name.
    pub directory: String,
    /// `--private-users[=auto|BASE[:SIZE]]`.
    pub private_users: Option<String>,
}
