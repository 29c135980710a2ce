//! bulkhead's Kubernetes node agent: the `BulkheadPlan` and `BulkheadNode` custom resources
//! (crd), a plan's spec as a plan file (convert), the pure reconcile decision (decide,
//! conditions), what the agent made (state), the node side through the bulkhead library
//! (machine), the check of a plan against the kubelet's configuration (kubelet), the node's
//! report in the API (report), the loop with the API (reconcile, run) and its health endpoint
//! (health). See docs/FLEET.md.

#![forbid(unsafe_code)]

pub mod conditions;
pub mod convert;
pub mod crd;
pub mod decide;
pub mod health;
pub mod kubelet;
pub mod logging;
pub mod machine;
pub mod nri;
pub mod pods;
pub mod reconcile;
pub mod report;
pub mod run;
pub mod state;
pub mod uninstall;
