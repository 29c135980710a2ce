//! Placing processes that already run: a whole process tree (`move --tree`), and the
//! placement rules of the plan (`bulkhead place`: [`rules`], and services by their pidfiles
//! where no systemd attaches them: [`pidfiles`]).

pub(crate) mod claims;
pub(crate) mod identity;
pub(crate) mod pidfiles;
pub(crate) mod rules;
pub(crate) mod state;
pub(crate) mod tree;
