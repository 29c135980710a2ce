//! `image`: the btrfs image store (create, mount, unmount, status) and the images in it
//! (import, list, remove). The store and the catalog are `crate::image`; this is their door.

pub use crate::image::{
    default_images_dir, format_time, images_dir, import, list, remove, store_create, store_mount,
    store_record_path, store_status, store_umount, Done, Image, StoreRecord, StoreStatus,
};
