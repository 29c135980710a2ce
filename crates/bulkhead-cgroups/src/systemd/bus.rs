//! The D-Bus side: a connection to systemd over the system bus, small hand-written proxies for the calls bulkhead makes, and
//! systemd's errors turned into messages that say what to do.

use super::props::{Prop, PropValue};
use super::versions::Version;
use bulkhead_sys::error::{Diagnostic, Error, Result};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use zbus::blocking::Connection;
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};

/// How long one D-Bus call may take before bulkhead gives up on it.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Extra properties for other units created in the same call: `a(sa(sv))`.
type Aux<'a> = Vec<(&'a str, Vec<(&'a str, Value<'a>)>)>;

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_async = false,
    blocking_name = "Manager"
)]
pub trait Manager {
    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Value<'_>)],
        aux: &Aux<'_>,
    ) -> zbus::Result<OwnedObjectPath>;
    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &[(&str, Value<'_>)],
    ) -> zbus::Result<()>;
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn kill_unit(&self, name: &str, whom: &str, signal: i32) -> zbus::Result<()>;
    fn freeze_unit(&self, name: &str) -> zbus::Result<()>;
    fn thaw_unit(&self, name: &str) -> zbus::Result<()>;
    fn reload(&self) -> zbus::Result<()>;
    fn attach_processes_to_unit(
        &self,
        unit_name: &str,
        subcgroup: &str,
        pids: &[u32],
    ) -> zbus::Result<()>;
    fn subscribe(&self) -> zbus::Result<()>;
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
}

#[zbus::proxy(
    interface = "org.freedesktop.DBus.Properties",
    default_service = "org.freedesktop.systemd1",
    gen_async = false,
    blocking_name = "Properties"
)]
pub trait Properties {
    fn get(&self, interface: &str, name: &str) -> zbus::Result<OwnedValue>;
    fn get_all(&self, interface: &str) -> zbus::Result<HashMap<String, OwnedValue>>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1",
    gen_async = false,
    blocking_name = "UnitObject"
)]
pub trait UnitObject {
    fn unref(&self) -> zbus::Result<()>;
}

/// A connection to systemd's manager.
pub struct Bus {
    pub conn: Connection,
    pub version: Version,
    /// The full version string, e.g. `252.39-1~deb12u2`.
    pub version_text: String,
    /// How bulkhead reached systemd (`the system bus`).
    pub via: String,
}

/// The state of a unit, as far as bulkhead needs it.
#[derive(Debug, Clone, Default)]
pub struct UnitState {
    pub load_state: String,
    pub active_state: String,
    pub transient: bool,
    /// The unit file systemd loaded it from ("" for transient units without one).
    pub fragment_path: String,
    pub drop_in_paths: Vec<String>,
    pub control_group: String,
    /// A job is queued for the unit.
    pub job: bool,
}

impl Bus {
    /// Connect through the system bus. (systemd's private socket, /run/systemd/private, is not
    /// used: zbus cannot read the sender names systemd puts on messages there.)
    pub fn connect() -> Result<Bus> {
        let conn = zbus::blocking::connection::Builder::system()
            .map(|b| b.method_timeout(CALL_TIMEOUT))
            .and_then(|b| b.build())
            .map_err(|e| {
                Error::failed_with(
                    Diagnostic::error(format!(
                        "cannot reach systemd over D-Bus: the system bus: {}",
                        short(&e)
                    ))
                    .hint(unreachable_hint(&e)),
                )
            })?;
        let via = "the system bus".to_string();
        let manager = Manager::new(&conn).map_err(|e| call_failed("connect to systemd", &e))?;
        let version_text = match manager.version() {
            Ok(v) => v,
            Err(e) => {
                let mut d =
                    Diagnostic::error(format!("systemd does not answer on {via}: {}", short(&e)));
                d = d.hint("check that systemd is PID 1 (ps -p 1), or use --backend cgroupfs");
                return Err(Error::failed_with(d));
            }
        };
        Ok(Bus {
            conn,
            version: parse_version(&version_text),
            version_text,
            via,
        })
    }

    pub fn manager(&self) -> Manager<'_> {
        Manager::new(&self.conn).expect("the manager proxy has fixed, valid names")
    }

    fn properties(&self, path: &OwnedObjectPath) -> Result<Properties<'_>> {
        Properties::builder(&self.conn)
            .path(path.clone())
            .and_then(|b| b.build())
            .map_err(|e| call_failed("read unit properties", &e))
    }

    /// The unit's D-Bus object path, if systemd has the unit loaded.
    pub fn unit_path(&self, unit: &str) -> Result<Option<OwnedObjectPath>> {
        match self.manager().get_unit(unit) {
            Ok(p) => Ok(Some(p)),
            Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => Ok(None),
            Err(e) => Err(call_failed(&format!("GetUnit({unit})"), &e)),
        }
    }

    /// A unit's state, `None` when systemd does not have it loaded.
    pub fn unit_state(&self, unit: &str) -> Result<Option<UnitState>> {
        let Some(path) = self.unit_path(unit)? else {
            return Ok(None);
        };
        let props = match self
            .properties(&path)?
            .get_all("org.freedesktop.systemd1.Unit")
        {
            Ok(p) => p,
            // Garbage-collected between the two calls.
            Err(e) if is_gone(&e) => return Ok(None),
            Err(e) => return Err(call_failed(&format!("read the state of {unit}"), &e)),
        };
        let s = |k: &str| {
            props
                .get(k)
                .and_then(|v| <&str>::try_from(&**v).ok())
                .unwrap_or_default()
                .to_string()
        };
        let mut st = UnitState {
            load_state: s("LoadState"),
            active_state: s("ActiveState"),
            transient: props
                .get("Transient")
                .and_then(|v| bool::try_from(&**v).ok())
                .unwrap_or(false),
            fragment_path: s("FragmentPath"),
            drop_in_paths: props
                .get("DropInPaths")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| Vec::<String>::try_from(v).ok())
                .unwrap_or_default(),
            control_group: String::new(),
            job: props
                .get("Job")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| <(u32, OwnedObjectPath)>::try_from(v).ok())
                .is_some_and(|(id, _)| id != 0),
        };
        let iface = unit_interface(unit);
        if let Ok(v) = self.properties(&path)?.get(iface, "ControlGroup") {
            st.control_group = <&str>::try_from(&*v).unwrap_or_default().to_string();
        }
        Ok(Some(st))
    }

    /// Every property of a unit's type interface (`org.freedesktop.systemd1.Slice`, ...).
    pub fn unit_properties(&self, unit: &str) -> Result<HashMap<String, OwnedValue>> {
        let Some(path) = self.unit_path(unit)? else {
            return Ok(HashMap::new());
        };
        let mut all = self
            .properties(&path)?
            .get_all(unit_interface(unit))
            .map_err(|e| call_failed(&format!("read the properties of {unit}"), &e))?;
        if let Ok(d) = self
            .properties(&path)?
            .get("org.freedesktop.systemd1.Unit", "Description")
        {
            all.insert("Description".into(), d);
        }
        Ok(all)
    }

    /// One property of a unit, on the given interface.
    pub fn unit_property(&self, unit: &str, iface: &str, name: &str) -> Result<Option<OwnedValue>> {
        let Some(path) = self.unit_path(unit)? else {
            return Ok(None);
        };
        match self.properties(&path)?.get(iface, name) {
            Ok(v) => Ok(Some(v)),
            Err(e) if is_gone(&e) => Ok(None),
            Err(e) => Err(call_failed(&format!("read {name} of {unit}"), &e)),
        }
    }

    /// Wait until systemd has no job for the unit any more; then return its ActiveState
    /// (`None`: the unit is gone, as a stopped transient unit is).
    pub fn wait_settled(&self, unit: &str, timeout: Duration) -> Result<Option<String>> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            let st = self.unit_state(unit)?;
            match &st {
                None => return Ok(None),
                Some(s) if !s.job && !s.active_state.ends_with("ing") => {
                    return Ok(Some(s.active_state.clone()))
                }
                _ => {}
            }
            if Instant::now() > deadline {
                return Err(Error::failed_with(
                    Diagnostic::error(format!(
                        "{unit} is still {} after {}s",
                        st.map(|s| s.active_state).unwrap_or_default(),
                        timeout.as_secs()
                    ))
                    .hint(format!("see: systemctl status {unit}")),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    pub fn start_transient(&self, unit: &str, props: &[Prop]) -> zbus::Result<OwnedObjectPath> {
        with_values(props, |values| {
            self.manager()
                .start_transient_unit(unit, "fail", values, &Vec::new())
        })
    }

    pub fn set_properties(&self, unit: &str, props: &[Prop]) -> zbus::Result<()> {
        with_values(props, |values| {
            self.manager().set_unit_properties(unit, true, values)
        })
    }

    pub fn unref(&self, unit: &str) {
        if let Ok(Some(path)) = self.unit_path(unit) {
            if let Ok(u) = UnitObject::builder(&self.conn)
                .path(path)
                .and_then(|b| b.build())
            {
                let _ = u.unref();
            }
        }
    }
}

/// Call `f` with the properties as D-Bus values (file descriptors are borrowed for the call).
fn with_values<T>(props: &[Prop], f: impl FnOnce(&[(&str, Value<'_>)]) -> T) -> T {
    let values: Vec<(&str, Value<'_>)> = props
        .iter()
        .map(|p| (p.name.as_str(), to_value(&p.value)))
        .collect();
    f(&values)
}

fn to_value(v: &PropValue) -> Value<'_> {
    match v {
        PropValue::U64(n) => Value::U64(*n),
        PropValue::Bool(b) => Value::Bool(*b),
        PropValue::Str(s) => Value::from(s.as_str()),
        PropValue::Strs(v) => Value::from(v.clone()),
        PropValue::Bytes(b) => Value::from(b.clone()),
        PropValue::DevU64(v) => Value::from(v.clone()),
        PropValue::Pids(v) => Value::from(v.clone()),
        PropValue::Exec(v) => Value::from(v.clone()),
        // The descriptors are bulkhead's own stdio or a pty it holds open for the whole call;
        // one closed since is passed as standard input instead.
        PropValue::Fd(fd) => Value::from(zbus::zvariant::Fd::from(
            bulkhead_sys::fd::borrow_held(*fd).unwrap_or_else(bulkhead_sys::fd::stdin),
        )),
    }
}

/// The D-Bus interface that holds a unit type's own properties.
pub fn unit_interface(unit: &str) -> &'static str {
    match unit.rsplit('.').next() {
        Some("slice") => "org.freedesktop.systemd1.Slice",
        Some("scope") => "org.freedesktop.systemd1.Scope",
        Some("service") => "org.freedesktop.systemd1.Service",
        _ => "org.freedesktop.systemd1.Unit",
    }
}

/// `252.39-1~deb12u2` -> 252; `v219` -> 219.
pub fn parse_version(s: &str) -> Version {
    s.trim_start_matches(|c: char| !c.is_ascii_digit())
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The D-Bus error name of a failed call.
pub fn error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        zbus::Error::FDO(f) => match **f {
            zbus::fdo::Error::AccessDenied(_) => Some("org.freedesktop.DBus.Error.AccessDenied"),
            zbus::fdo::Error::UnknownMethod(_) => Some("org.freedesktop.DBus.Error.UnknownMethod"),
            zbus::fdo::Error::UnknownObject(_) => Some("org.freedesktop.DBus.Error.UnknownObject"),
            zbus::fdo::Error::InvalidArgs(_) => Some("org.freedesktop.DBus.Error.InvalidArgs"),
            _ => None,
        },
        _ => None,
    }
}

fn is_gone(e: &zbus::Error) -> bool {
    matches!(
        error_name(e),
        Some(
            "org.freedesktop.DBus.Error.UnknownObject"
                | "org.freedesktop.systemd1.NoSuchUnit"
                | "org.freedesktop.DBus.Error.UnknownInterface"
        )
    )
}

/// The message of a failed call without zbus's decoration.
pub fn short(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(_, Some(m), _) => m.clone(),
        zbus::Error::MethodError(name, None, _) => name.to_string(),
        zbus::Error::FDO(f) => f.to_string(),
        zbus::Error::InputOutput(io) => bulkhead_sys::error::errno_text(io),
        other => other.to_string(),
    }
}

fn unreachable_hint(e: &zbus::Error) -> String {
    let denied = matches!(e, zbus::Error::InputOutput(io) if io.kind() == std::io::ErrorKind::PermissionDenied);
    if denied {
        "the system bus socket is not accessible to this user: run as root".into()
    } else {
        "is systemd PID 1 here, and is dbus running (systemctl start dbus)? Otherwise use --backend cgroupfs".into()
    }
}

/// What to tell the user about a failed call, by systemd's error name.
pub fn hint_for(e: &zbus::Error) -> Option<String> {
    Some(match error_name(e)? {
        "org.freedesktop.DBus.Error.AccessDenied"
        | "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired" => {
            "changing systemd units needs root (or a polkit rule that allows it): run bulkhead as root".into()
        }
        "org.freedesktop.DBus.Error.UnknownMethod" => {
            "this systemd is too old for the call; upgrade systemd or use --backend cgroupfs".into()
        }
        "org.freedesktop.systemd1.UnitExists" => {
            "a unit of that name exists already and was not made by bulkhead; rename the slice in the plan".into()
        }
        _ => return None,
    })
}

/// A failed call as an error that names what was being done.
pub fn call_failed(what: &str, e: &zbus::Error) -> Error {
    let mut d = Diagnostic::error(format!("{what}: systemd said: {}", short(e)));
    if let Some(h) = hint_for(e) {
        d = d.hint(h);
    }
    Error::failed_with(d)
}

/// systemd's D-Bus object path for a unit (sd_bus_path_encode).
pub fn unit_object_path(unit: &str) -> String {
    let mut out = String::from("/org/freedesktop/systemd1/unit/");
    for (i, b) in unit.bytes().enumerate() {
        if b.is_ascii_alphabetic() || (b.is_ascii_digit() && i > 0) {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("252.39-1~deb12u2"), 252);
        assert_eq!(parse_version("219"), 219);
        assert_eq!(parse_version("v255-rc1"), 255);
        assert_eq!(parse_version(""), 0);
    }

    #[test]
    fn object_paths() {
        assert_eq!(
            unit_object_path("db-helper.slice"),
            "/org/freedesktop/systemd1/unit/db_2dhelper_2eslice"
        );
        assert_eq!(
            unit_object_path("1a.slice"),
            "/org/freedesktop/systemd1/unit/_31a_2eslice"
        );
    }
}
