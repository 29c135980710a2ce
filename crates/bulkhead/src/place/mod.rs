//! Placing processes that already run: a whole process tree (`move --tree`), and the
//! placement rules of the plan (`bulkhead place`: [`rules`]).

pub(crate) mod rules;
pub(crate) mod tree;
