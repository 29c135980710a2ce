//! A slice as a container takes it (the NRI plugin's one question): the node's cgroup layout
//! and kernel capabilities read here, the mapping done by `bulkhead-cgroups`' container
//! module, the same mapping `apply` plans slices with. A directive the kernel cannot apply is
//! a finding with its reason, never a write that fails.

use bulkhead_cgroups::Layout;
use bulkhead_plan::ResolvedSlice;
use bulkhead_sys::error::{Error, Result};

pub use bulkhead_cgroups::container::{Node, Oci, Resources, Write};
pub use bulkhead_cgroups::layout::Caps;
pub use bulkhead_cgroups::Version;

/// This node: its layout as runc sees it, and its kernel's capabilities probed now (a disk
/// switched to BFQ, or io.cost enabled by the agent's plan, counts from the next call).
pub fn node() -> Result<Node> {
    let layout = Layout::detect()
        .map_err(|e| Error::failed(format!("cannot read /proc/self/mountinfo: {e}")))?;
    let caps = layout.caps();
    Ok(Node::of(&layout, caps))
}

/// What a container on `node` gets of the slice `s`.
pub fn resources(s: &ResolvedSlice, node: &Node) -> Resources {
    bulkhead_cgroups::container::resources(s, node)
}
