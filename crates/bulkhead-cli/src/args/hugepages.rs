//! `bulkhead hugepages ...`.

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum HugepagesCmd {
    /// Pools per size and node, THP, hugetlbfs mounts, per-slice and top processes' huge
    /// page use, and processes that asked for huge pages but did not get them
    Status(StatusArgs),
    /// How much of a process's memory is on 4K pages, THP and hugetlb pages
    Usage(PidArgs),
    /// Move a running process's anonymous memory onto THP now (MADV_COLLAPSE)
    #[command(
        long_about = "Move a running process's anonymous memory onto transparent huge pages now, \
with process_madvise(MADV_COLLAPSE) on a pidfd (Linux 6.1+), instead of waiting for khugepaged. \
Private anonymous areas are advised in their 2M-aligned parts; areas the program marked \
MADV_NOHUGEPAGE are left alone. A partly used 2M range is filled when it is collapsed, so \
resident memory can grow: the report shows coverage and resident memory before and after.",
        after_help = "Exit status: 0 when every range was collapsed, 1 when some were not (the \
kernel's reason is printed), 2 for a PID that does not exist or a kernel without MADV_COLLAPSE."
    )]
    Collapse(PidArgs),
    /// Put back the pools, THP switches and mounts bulkhead found before it first changed them
    #[command(
        long_about = "Put back what bulkhead found before it first changed a huge page setting: \
pool sizes, THP switches, and hugetlbfs mounts it made (unmounted, with the directories it \
created). The record is kept in /run/bulkhead/hugepages.json (BULKHEAD_HUGEPAGES_STATE \
overrides it) and written before every change, so it also covers an apply that was killed \
halfway. Pages still in use when a pool shrinks become surplus and return to the system as \
their users free them."
    )]
    Reset(ResetArgs),
}

#[derive(Args)]
pub struct StatusArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// How many processes to list by huge page memory
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
}

#[derive(Args)]
pub struct PidArgs {
    /// The process ID
    #[arg(value_name = "PID", allow_negative_numbers = true)]
    pub pid: i32,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ResetArgs {
    /// Print what would be put back, and change nothing
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}
