//! `bulkhead iocost ...`.

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum IocostCmd {
    /// Measure a disk's cost model for io.cost (the [iocost] section's `model`)
    #[allow(rustdoc::broken_intra_doc_links)] // --help text: the plan's [iocost] section
    #[command(
        long_about = "Measure a disk's linear cost model for io.cost, the six coefficients of \
io.cost.model (rbps, rseqiops, rrandiops, wbps, wseqiops, wrandiops), as the kernel's \
iocost_coef_gen.py does, in a few seconds each: direct I/O of 4 MiB blocks for the bandwidths, \
of 4 KiB at --depth concurrent I/Os for the IOPS, with the disk's scheduler set to none and \
merges off while it runs (put back afterwards). PATH is a directory on the disk (an unnamed scratch \
file of --size is written there, gone when the measurement ends), or the disk's block device \
(reads only, unless --destroy-data). PATH may not lead through a symlink another user owns. Prints the `model = { ... }` line for the plan's [iocost] section.",
        after_help = "Run it while the disk is otherwise quiet: what else runs there is not \
counted and lowers the figures."
    )]
    Calibrate(CalibrateArgs),
}

#[derive(Args)]
pub struct CalibrateArgs {
    /// A directory on the disk to measure, or its block device
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// How long each of the six measurements runs
    #[arg(long, default_value_t = 3.0, value_name = "SECONDS")]
    pub seconds: f64,
    /// The scratch file's size (in a directory)
    #[arg(long, default_value = "256M", value_name = "SIZE")]
    pub size: String,
    /// Concurrent I/Os of the 4 KiB measurements
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub depth: usize,
    /// Also write to a block device named as PATH (overwrites its data)
    #[arg(long)]
    pub destroy_data: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}
