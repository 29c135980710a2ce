//! `image ...`: the btrfs image store and the images sandboxes start from.

use crate::args::image::{ImageCmd, StoreCmd};
use crate::args::Cli;
use crate::cmd::json;
use bulkhead::actions::image::{self, Done, Image};
use bulkhead::error::Result;
use bulkhead::units::human_bytes;

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
            let img = image::import(&a.src, &a.name, a.read_only)?;
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
                println!("{}", json(&images));
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
            Some(s) => serde_json::to_value(s).unwrap_or_default(),
            None => serde_json::json!({
                "record_path": image::store_record_path(),
                "record": null,
                "images_dir": image::default_images_dir(),
            }),
        };
        println!("{}", crate::cmd::json(&v));
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
