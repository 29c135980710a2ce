//! `iocost calibrate`: measure a disk's io.cost model (`crate::calibrate` does the work).

pub use crate::calibrate::{calibrate, Calibration, Request};
