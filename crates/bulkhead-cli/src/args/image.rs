//! `bulkhead image ...`.

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ImageCmd {
    /// The image store: a btrfs file system in a file, loop-mounted at the images directory,
    /// so every image is a subvolume and a sandbox starts from a snapshot in constant time
    #[command(subcommand)]
    Store(StoreCmd),
    /// Import a directory or a tarball as an image (a btrfs subvolume in the store, else a
    /// plain directory); a failed import leaves nothing behind
    Import(ImportArgs),
    /// List the images: name, size, creation time, whether it is a subvolume, path
    List(ListArgs),
    /// Remove an image (sandboxes running from a snapshot of it keep their copy)
    Rm(RmArgs),
}

#[derive(Subcommand)]
pub enum StoreCmd {
    /// Create the store: allocate PATH, make a btrfs file system in it, mount it (through a
    /// loop device) at the images directory, and record it for `store mount`
    Create(CreateArgs),
    /// Mount the recorded store again, e.g. after a reboot (already mounted: says so, exit 0)
    Mount,
    /// Unmount the store and detach its loop device; the file and its images stay
    Umount,
    /// Show the recorded store: file, size, mount point, loop device, space, images
    Status(JsonArg),
}

#[derive(Args)]
pub struct CreateArgs {
    /// Size of the store file (K, M, G, T; base 1024); at least 109M, mkfs.btrfs's minimum
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub size: u64,
    /// Where to mount it [default: /var/lib/bulkhead/images]
    #[arg(long, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// The store file to create (must not exist)
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

#[derive(Args)]
pub struct ImportArgs {
    /// A root file system directory, or a tarball (.tar, .tar.gz, .tar.zst, .tar.xz)
    #[arg(value_name = "SRC")]
    pub src: PathBuf,
    /// The image name: letters, digits, '.', '_', '-', starting with a letter or digit
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Make the image read-only (a btrfs store is needed): ephemeral sandboxes of it then
    /// start from snapshots made ahead of time
    #[arg(long)]
    pub read_only: bool,
}

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct JsonArg {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct RmArgs {
    /// The image name
    #[arg(value_name = "NAME")]
    pub name: String,
}

pub fn size(s: &str) -> std::result::Result<u64, String> {
    match bulkhead::units::parse_size(s, 1024)? {
        0 => Err("the size must be more than 0".into()),
        n => Ok(n),
    }
}
