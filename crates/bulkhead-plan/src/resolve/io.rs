//! IOWeight, IODeviceWeight and the IO*Max limits: device paths resolved to whole disks.

use super::{plain, Ctx, ResolvedSlice, Setting};
use crate::{At, SliceName, Value};
use bulkhead_sys::host::DevNum;
use bulkhead_sys::units::Limit;
use std::path::Path;

pub fn weight(r: &mut ResolvedSlice, key: &str, w: u64) {
    r.io_weight = Some(w);
    r.settings.push(plain(key, w.to_string(), w.to_string()));
}

/// A device path of the plan as a disk number, or an error at the directive.
fn device(cx: &mut Ctx, name: &SliceName, key: &str, at: &At<Value>, dev: &str) -> Option<DevNum> {
    match DevNum::resolve(Path::new(dev)) {
        Ok(d) => Some(d),
        Err(m) => {
            cx.err(
                name,
                key,
                at,
                m,
                "name an existing block device or a path on one",
            );
            None
        }
    }
}

pub fn device_weights(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    list: &[(String, u64)],
    r: &mut ResolvedSlice,
) {
    for (dev, w) in list {
        let Some(d) = device(cx, name, key, at, dev) else {
            continue;
        };
        r.io_device_weight.insert(d, *w);
        r.device_paths.insert(d, dev.clone());
        r.settings.push(Setting {
            directive: key.into(),
            value: format!("{d} {w}"),
            bytes: None,
            from: Some(format!("device {d}")),
            toml: format!("\"{dev} {w}\""),
        });
    }
}

pub fn device_limits(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    list: &[(String, Limit)],
    r: &mut ResolvedSlice,
) {
    for (dev, l) in list {
        let Some(d) = device(cx, name, key, at, dev) else {
            continue;
        };
        r.device_paths.insert(d, dev.clone());
        let e = r.io_max.entry(d).or_default();
        match key {
            "IOReadBandwidthMax" => e.rbps = Some(*l),
            "IOWriteBandwidthMax" => e.wbps = Some(*l),
            "IOReadIOPSMax" => e.riops = Some(*l),
            _ => e.wiops = Some(*l),
        }
        let text = l.bytes().map_or("infinity".into(), |b| b.to_string());
        r.settings.push(Setting {
            directive: key.into(),
            value: format!("{d} {text}"),
            bytes: None,
            from: Some(format!("device {d}")),
            toml: format!("\"{dev} {text}\""),
        });
    }
}
