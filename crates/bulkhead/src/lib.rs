//! bulkhead: isolate the workloads of a database host with cgroups, namespaces,
//! copy-on-write snapshots and huge pages, without Docker.
//!
//! Data flows one way: a plan file is parsed and validated ([`plan`]), resolved against the
//! host ([`host`]), and turned into backend operations ([`cgroup`]) that can be printed as a
//! dry run or applied. [`run`] puts commands into slices and [`metrics`] reads what they use;
//! [`exposition`] renders that for Prometheus.
//! [`sandbox`] starts commands in namespaces and a root file system; [`snapshot`] makes the writable root copies of ephemeral sandboxes, from images kept by
//! [`image`].
//! [`hugepages`] reserves and checks huge page pools, THP and hugetlbfs mounts.

#![forbid(unsafe_code)]

pub mod actions;
pub mod activate;
pub mod calibrate;
pub mod context;
pub mod exposition;
pub mod guard;
pub mod hugepages;
pub mod image;
pub mod run;
pub mod sandbox;
pub mod snapshot;
pub mod tasks;

pub use bulkhead_cgroups as cgroup;
pub use bulkhead_cgroups::stats as metrics;
pub use bulkhead_plan as plan;
pub use bulkhead_sys as sys;
pub use bulkhead_sys::{error, host, units};
pub use bulkhead_sys::{Diagnostic, Error, Result};
