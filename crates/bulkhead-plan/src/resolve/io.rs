//! IOWeight, IODeviceWeight, IODeviceLatencyTargetSec and the IO*Max limits: device
//! arguments as the whole disks the host facts resolved them to.

use super::{plain, Ctx, ResolvedSlice, Setting};
use crate::{At, SliceName, Value};
use bulkhead_sys::host::DevNum;
use bulkhead_sys::units::Limit;
use std::time::Duration;

pub fn weight(r: &mut ResolvedSlice, key: &str, w: u64) {
    r.io_weight = Some(w);
    r.settings.push(plain(key, w.to_string(), w.to_string()));
}

/// Each device argument of `list` as a whole disk, from the host facts (looked up before
/// resolving, see [`crate::Plan::device_paths`]), or an error at the directive. `set` records
/// an entry's value for its disk and returns the value's text for the setting `DISK TEXT`.
fn per_device<T>(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    list: &[(String, T)],
    r: &mut ResolvedSlice,
    mut set: impl FnMut(&mut ResolvedSlice, DevNum, &T) -> String,
) {
    for (dev, v) in list {
        let (d, how) = match crate::devices::look_up(cx.host, dev) {
            Ok(d) => d,
            Err(m) => {
                cx.err(name, key, at, m, crate::devices::HINT);
                continue;
            }
        };
        r.device_paths.insert(d, dev.clone());
        let text = set(r, d, v);
        r.settings.push(Setting {
            directive: key.into(),
            value: format!("{d} {text}"),
            bytes: None,
            from: Some(how),
            toml: format!("\"{dev} {text}\""),
        });
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
    per_device(cx, name, key, at, list, r, |r, d, w| {
        r.io_device_weight.insert(d, *w);
        w.to_string()
    });
}

pub fn device_limits(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    list: &[(String, Limit)],
    r: &mut ResolvedSlice,
) {
    per_device(cx, name, key, at, list, r, |r, d, l| {
        let e = r.io_max.entry(d).or_default();
        match key {
            "IOReadBandwidthMax" => e.rbps = Some(*l),
            "IOWriteBandwidthMax" => e.wbps = Some(*l),
            "IOReadIOPSMax" => e.riops = Some(*l),
            _ => e.wiops = Some(*l),
        }
        l.bytes().map_or("infinity".into(), |b| b.to_string())
    });
}

/// IODeviceLatencyTargetSec: io.latency's target per disk, in microseconds (None: `max`, no
/// target).
pub fn device_latency(
    cx: &mut Ctx,
    name: &SliceName,
    key: &str,
    at: &At<Value>,
    list: &[(String, Option<Duration>)],
    r: &mut ResolvedSlice,
) {
    per_device(cx, name, key, at, list, r, |r, d, target| {
        // The kernel counts the target in microseconds; round up so 0.5us is not "none".
        let us = target.map(|t| (t.as_nanos().div_ceil(1000)).min(u64::MAX as u128) as u64);
        r.io_latency.insert(d, us);
        us.map_or("infinity".into(), micros)
    });
}

/// Microseconds as a time span the plan reads back: `10ms`, `2500us`.
pub(crate) fn micros(us: u64) -> String {
    if us >= 1000 && us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}
