//! Directory trees: open one, copy one (reflink, copy_file_range) with everything a root file
//! system holds, and remove one without leaving its file system. Both walks go by directory
//! descriptors, never by a path string that could be resolved again.

pub use crate::copy::{copy_tree, CopyFail, CopyFrom};
pub use crate::dir::open_dir;
pub use crate::remove::{remove_tree, remove_tree_at};
