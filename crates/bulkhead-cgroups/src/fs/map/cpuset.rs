//! AllowedCPUs and AllowedMemoryNodes: cpuset.cpus and cpuset.mems.

use super::{v, Cmp, Mapper};
use crate::layout::Version;

impl Mapper<'_> {
    pub(super) fn cpuset(&mut self, version: Version) {
        let s = self.slice;
        for (file, mine, inherited, key) in [
            (
                "cpuset.cpus",
                &s.allowed_cpus,
                &self.inherited_cpuset.0,
                "AllowedCPUs",
            ),
            (
                "cpuset.mems",
                &s.allowed_mems,
                &self.inherited_cpuset.1,
                "AllowedMemoryNodes",
            ),
        ] {
            let want = match (mine, version) {
                (Some(set), _) => v(
                    file,
                    set.to_string(),
                    format!("{key}={set}"),
                    Cmp::Set,
                    false,
                ),
                // v2: empty means "the parent's".
                (None, Version::V2) => v(file, "", format!("{key} (inherit)"), Cmp::Set, true),
                // v1: a cpuset cgroup holds no task until both lists are set.
                (None, Version::V1) => v(
                    file,
                    inherited.to_string(),
                    format!("{key} (inherited {inherited})"),
                    Cmp::Set,
                    false,
                ),
            };
            self.wants.push(want);
        }
    }
}
