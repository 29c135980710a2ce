//! `bulkhead image ...`: the btrfs image store and the images sandboxes start from.

use crate::Cli;
use bulkhead::error::Result;
use bulkhead::image::{self, Done, Image};
use bulkhead::units::human_bytes;
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
    size: u64,
    /// Where to mount it [default: /var/lib/bulkhead/images]
    #[arg(long, value_name = "DIR")]
    mount: Option<PathBuf>,
    /// The store file to create (must not exist)
    #[arg(value_name = "PATH")]
    path: PathBuf,
}

#[derive(Args)]
pub struct ImportArgs {
    /// A root file system directory, or a tarball (.tar, .tar.gz, .tar.zst, .tar.xz)
    #[arg(value_name = "SRC")]
    src: PathBuf,
    /// The image name: letters, digits, '.', '_', '-', starting with a letter or digit
    #[arg(value_name = "NAME")]
    name: String,
    /// Make the image read-only (a btrfs store is needed): ephemeral sandboxes of it then
    /// start from snapshots made ahead of time
    #[arg(long)]
    read_only: bool,
}

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct JsonArg {
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RmArgs {
    /// The image name
    #[arg(value_name = "NAME")]
    name: String,
}

fn size(s: &str) -> std::result::Result<u64, String> {
    match bulkhead::units::parse_size(s, 1024)? {
        0 => Err("the size must be more than 0".into()),
        n => Ok(n),
    }
}

pub fn dispatch(cli: &Cli, cmd: &ImageCmd) -> Result<i32> {
    let say = |text: String| {
        if !cli.quiet {
            println!("{text}");
        }
    };
    match cmd {
        ImageCmd::Store(StoreCmd::Create(a)) => {
            let rec = image::store_create(&a.path, a.size, a.mount.as_deref())?;
            say(format!(
                "created the image store {} ({}, btrfs), mounted at {}; recorded in {}",
                rec.file.display(),
                human_bytes(rec.size),
                rec.mount.display(),
                image::store_record_path().display()
            ));
        }
        ImageCmd::Store(StoreCmd::Mount) => {
            let (rec, done) = image::store_mount()?;
            say(match done {
                Done::Now => format!(
                    "mounted the image store {} at {}",
                    rec.file.display(),
                    rec.mount.display()
                ),
                Done::Already => format!(
                    "the image store {} is already mounted at {}",
                    rec.file.display(),
                    rec.mount.display()
                ),
            });
        }
        ImageCmd::Store(StoreCmd::Umount) => {
            let (rec, done) = image::store_umount()?;
            say(match done {
                Done::Now => format!(
                    "unmounted the image store at {} and detached its loop device; {} stays (bulkhead image store mount brings it back)",
                    rec.mount.display(),
                    rec.file.display()
                ),
                Done::Already => format!(
                    "the image store {} is not mounted",
                    rec.file.display()
                ),
            });
        }
        ImageCmd::Store(StoreCmd::Status(a)) => store_status(a.json)?,
        ImageCmd::Import(a) => {
            if a.read_only && !image::images_on_btrfs() {
                return Err(bulkhead::error::Error::invalid(
                    bulkhead::error::Diagnostic::error(
                        "--read-only needs the btrfs image store: images here are plain directories",
                    )
                    .hint("create the store first: bulkhead image store create --size 10G FILE"),
                ));
            }
            let img = image::import(&a.src, &a.name)?;
            if a.read_only {
                bulkhead::snapshot::set_read_only(&img.path).map_err(|e| {
                    bulkhead::error::io_failed("cannot make the image read-only:", &img.path, e)
                })?;
            }
            say(format!(
                "imported {} as {} ({}, {})",
                a.src.display(),
                img.name,
                if img.subvolume {
                    "btrfs subvolume"
                } else {
                    "directory"
                },
                human_bytes(img.size)
            ));
        }
        ImageCmd::List(a) => {
            let images = image::list()?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&images).unwrap());
            } else if images.is_empty() {
                say(format!(
                    "no images in {} (bulkhead image import SRC NAME adds one)",
                    image::images_dir()?.display()
                ));
            } else {
                print!("{}", table(&images));
            }
        }
        ImageCmd::Rm(a) => {
            let img = image::remove(&a.name)?;
            say(format!(
                "removed the image {} ({})",
                img.name,
                img.path.display()
            ));
        }
    }
    Ok(0)
}

fn store_status(json: bool) -> Result<()> {
    let st = image::store_status()?;
    if json {
        let v = match &st {
            Some(s) => serde_json::to_value(s).unwrap(),
            None => serde_json::json!({
                "record_path": image::store_record_path(),
                "record": null,
                "images_dir": image::default_images_dir(),
            }),
        };
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
        return Ok(());
    }
    let Some(s) = st else {
        println!(
            "no image store is recorded (in {}); images are plain directories in {}",
            image::store_record_path().display(),
            image::default_images_dir().display()
        );
        return Ok(());
    };
    println!("record:  {}", s.record_path.display());
    println!(
        "file:    {} ({}, created {} UTC)",
        s.record.file.display(),
        human_bytes(s.record.size),
        image::format_time(s.record.created)
    );
    match &s.loop_device {
        Some(dev) => println!("mount:   {} (mounted from {dev})", s.record.mount.display()),
        None => println!(
            "mount:   {} (not mounted: bulkhead image store mount)",
            s.record.mount.display()
        ),
    }
    if let (Some(used), Some(free)) = (s.used, s.free) {
        println!(
            "space:   {} used, {} free",
            human_bytes(used),
            human_bytes(free)
        );
    }
    if let Some(n) = s.images {
        println!("images:  {n}");
    }
    Ok(())
}

fn table(images: &[Image]) -> String {
    let rows: Vec<[String; 5]> = images
        .iter()
        .map(|i| {
            [
                i.name.clone(),
                human_bytes(i.size),
                i.created
                    .map(image::format_time)
                    .unwrap_or_else(|| "-".into()),
                if i.subvolume { "yes" } else { "no" }.into(),
                i.path.display().to_string(),
            ]
        })
        .collect();
    let head = ["NAME", "SIZE", "CREATED (UTC)", "SUBVOLUME", "PATH"];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == 4 {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(head);
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
    }
    out
}
