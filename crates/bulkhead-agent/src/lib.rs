//! bulkhead's Kubernetes node agent: the `BulkheadPlan` custom resource (crd), its spec as a
//! plan file (convert), the pure reconcile decision (decide, conditions), what the agent made
//! (state), the node side through the bulkhead library (machine), the loop with the API
//! (reconcile, run), its health endpoint (health) and the check of the plan against the
//! kubelet's configuration (kubelet). See docs/FLEET.md.

#![forbid(unsafe_code)]

pub mod conditions;
pub mod convert;
pub mod crd;
pub mod decide;
pub mod health;
pub mod kubelet;
pub mod machine;
pub mod reconcile;
pub mod run;
pub mod state;
