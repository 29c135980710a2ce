//! `services = ["postgresql@15-main.service"]` in a `[slice.NAME]` table: systemd services
//! the plan puts in that slice. A key in the plan's own lower-case spelling (systemd's
//! directives are CamelCase): on systemd hosts `apply` writes each service a `Slice=` drop-in.
//! A name becomes a path under /etc/systemd/system, so only unit-name characters are taken.

use toml::de::DeValue;

/// The key in a slice table.
pub const KEY: &str = "services";
/// At most this many services in one slice.
pub const MAX_SERVICES: usize = 32;
/// systemd's own limit on a unit name.
const MAX_NAME: usize = 255;

/// One service of a slice.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Service {
    /// The unit name (`.service` added when the plan left it out).
    pub name: String,
    /// Where its main PID is written, for hosts without systemd (`bulkhead place` moves that
    /// process's tree): an absolute path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pidfile: Option<String>,
}

const HINT: &str = "write services = [\"postgresql@15-main.service\"], or { name = \"...\", pidfile = \"/path\" } for hosts without systemd";

/// The services of a `services = ...` value, checked; Err: the message and a hint.
pub(crate) fn parse(v: &DeValue<'_>, raw: &str) -> Result<Vec<Service>, (String, String)> {
    let items: Vec<&DeValue<'_>> = match v {
        DeValue::Array(a) => a.iter().map(|i| i.get_ref()).collect(),
        one => vec![one],
    };
    if items.is_empty() || items.len() > MAX_SERVICES {
        return Err((
            format!("services = {raw}: give 1 to {MAX_SERVICES} services"),
            "write services = [\"postgresql@15-main.service\"]".into(),
        ));
    }
    let mut out: Vec<Service> = Vec::new();
    for i in items {
        let (s, pidfile) = match i {
            DeValue::String(s) => (s.to_string(), None),
            DeValue::Table(t) => table(t, raw)?,
            _ => {
                return Err((
                    format!("services = {raw}: a service is a unit name in quotes"),
                    HINT.into(),
                ))
            }
        };
        let name = check_name(&s).map_err(|m| {
            (
                format!("services = {raw}: {m}"),
                "name a service unit as systemctl shows it: NAME.service or TEMPLATE@INSTANCE.service".into(),
            )
        })?;
        if out.iter().any(|x| x.name == name) {
            return Err((
                format!("services = {raw}: '{name}' is listed twice"),
                "list each service once".into(),
            ));
        }
        out.push(Service { name, pidfile });
    }
    Ok(out)
}

/// `{ name = "...", pidfile = "/abs/path" }`.
fn table(
    t: &toml::de::DeTable<'_>,
    raw: &str,
) -> Result<(String, Option<String>), (String, String)> {
    let (mut name, mut pidfile) = (None, None);
    for (k, v) in t.iter() {
        let DeValue::String(text) = v.get_ref() else {
            return Err((
                format!("services = {raw}: {} must be a string", k.get_ref()),
                HINT.into(),
            ));
        };
        match k.get_ref().as_ref() {
            "name" => name = Some(text.to_string()),
            "pidfile" if text.starts_with('/') && text.len() <= 4096 => {
                pidfile = Some(text.to_string())
            }
            "pidfile" => {
                return Err((
                    format!("services = {raw}: pidfile must be an absolute path"),
                    "write e.g. pidfile = \"/var/lib/postgresql/15/main/postmaster.pid\"".into(),
                ))
            }
            other => {
                return Err((
                    format!("services = {raw}: unknown key '{other}'"),
                    "a service table takes name and pidfile".into(),
                ))
            }
        }
    }
    let name = name.ok_or_else(|| {
        (
            format!("services = {raw}: a service table needs name"),
            HINT.into(),
        )
    })?;
    Ok((name, pidfile))
}

/// A service unit name: `.service` added when missing, unit-name characters only (no `/`:
/// it names a directory under /etc/systemd/system).
pub fn check_name(s: &str) -> Result<String, String> {
    let name = if s.ends_with(".service") {
        s.to_string()
    } else if s.contains('.') {
        return Err(format!(
            "'{s}' is not a service (a name ending in .service)"
        ));
    } else {
        format!("{s}.service")
    };
    let stem = &name[..name.len() - ".service".len()];
    let ok = |c: char| c.is_ascii_alphanumeric() || ":-_.\\@".contains(c);
    if stem.is_empty() || stem.starts_with('@') || name.len() > MAX_NAME || !stem.chars().all(ok) {
        return Err(format!(
            "'{s}' is not a valid unit name (letters, digits and :-_.\\@, at most {MAX_NAME} characters)"
        ));
    }
    if stem.ends_with('@') {
        return Err(format!(
            "'{s}' is a template: name an instance, e.g. postgresql@15-main.service"
        ));
    }
    Ok(name)
}

/// Every (service, slice) of the plan, by slice then by the plan's order.
pub fn of_plan(plan: &crate::Plan) -> Vec<(String, crate::SliceName)> {
    with_pidfiles(plan)
        .into_iter()
        .map(|(s, slice)| (s.name, slice))
        .collect()
}

/// Every service of the plan, with its pidfile, and its slice.
pub fn with_pidfiles(plan: &crate::Plan) -> Vec<(Service, crate::SliceName)> {
    plan.slices
        .values()
        .flat_map(|s| s.services.iter().map(|a| (a.value.clone(), s.name.clone())))
        .collect()
}

/// A service can be in one slice only.
pub(crate) fn check_unique(
    source: &crate::Source,
    slices: &std::collections::BTreeMap<crate::SliceName, crate::SliceSpec>,
    errors: &mut Vec<bulkhead_sys::error::Diagnostic>,
) {
    let mut seen: std::collections::BTreeMap<&str, &crate::SliceName> = Default::default();
    for s in slices.values() {
        for a in &s.services {
            if let Some(first) = seen.insert(&a.value.name, &s.name) {
                errors.push(
                    bulkhead_sys::error::Diagnostic::error(format!(
                        "'{}' is in two slices: {first} and {}",
                        a.value.name, s.name
                    ))
                    .at(source.at(a.loc))
                    .context(format!("[slice.{}] {KEY}", s.name))
                    .hint("a service runs in one slice: remove it from one of them"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Plan, EMBEDDED_DEFAULT};

    fn plan(server_extra: &str) -> Result<Plan, String> {
        let text = EMBEDDED_DEFAULT.replace(
            "[slice.db-server]\n",
            &format!("[slice.db-server]\n{server_extra}\n"),
        );
        Plan::parse(&text, None).map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn services_parse() {
        let p = plan("services = [\"postgresql@15-main.service\", \"redis-server\"]").unwrap();
        let all = of_plan(&p);
        assert_eq!(
            all.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(),
            ["postgresql@15-main.service", "redis-server.service"]
        );
        assert_eq!(all[0].1.as_str(), "db-server");
        let p = plan("services = \"mysql\"").unwrap();
        assert_eq!(of_plan(&p)[0].0, "mysql.service");
        let p = plan("services = [{ name = \"pg\", pidfile = \"/run/pg.pid\" }]").unwrap();
        let (svc, _) = &with_pidfiles(&p)[0];
        assert_eq!(svc.name, "pg.service");
        assert_eq!(svc.pidfile.as_deref(), Some("/run/pg.pid"));
    }

    #[test]
    fn bad_names_say_why() {
        for (v, want) in [
            ("\"../../etc/passwd\"", "not a service"),
            ("\"a/b\"", "not a valid unit name"),
            ("\"postgresql@.service\"", "a template"),
            ("\"db.slice\"", "not a service"),
            ("[]", "1 to 32 services"),
            ("[1]", "unit name in quotes"),
            ("[\"a\", \"a.service\"]", "listed twice"),
            ("[{ pidfile = \"/x\" }]", "needs name"),
            ("[{ name = \"a\", pidfile = \"x\" }]", "absolute path"),
            ("[{ name = \"a\", pid = \"/x\" }]", "unknown key 'pid'"),
        ] {
            let e = plan(&format!("services = {v}")).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
        }
    }

    #[test]
    fn a_service_in_two_slices_is_refused() {
        let text = format!("{EMBEDDED_DEFAULT}\nservices = [\"pg.service\"]\n").replace(
            "[slice.db-server]\n",
            "[slice.db-server]\nservices = [\"pg\"]\n",
        );
        let e = format!("{:?}", Plan::parse(&text, None).unwrap_err());
        assert!(e.contains("'pg.service' is in two slices"), "{e}");
    }
}
