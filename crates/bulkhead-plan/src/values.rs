//! Reading the values of a plan section ([socket.NAME], [guard]): strings, lists, time
//! spans, counts, each with an error at the key when it is something else.

use crate::{Loc, Source};
use bulkhead_sys::error::Diagnostic;
use bulkhead_sys::units::parse_duration;
use std::time::Duration;
use toml::de::DeValue;

pub(crate) struct Ctx<'a> {
    pub source: &'a Source,
    pub section: String,
    pub errors: &'a mut Vec<Diagnostic>,
}

impl Ctx<'_> {
    pub fn err(&mut self, loc: Loc, key: &str, msg: String, hint: &str) {
        let mut d = Diagnostic::error(msg)
            .at(self.source.at(loc))
            .context(format!("{} {key}", self.section));
        if !hint.is_empty() {
            d = d.hint(hint);
        }
        self.errors.push(d);
    }
    pub fn string(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<String> {
        match v {
            DeValue::String(s) => Some(s.to_string()),
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a string"),
                    "write it in double quotes",
                );
                None
            }
        }
    }
    pub fn strings(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<Vec<String>> {
        match v {
            DeValue::String(s) => Some(vec![s.to_string()]),
            DeValue::Array(a) => {
                let mut out = Vec::new();
                for i in a.iter() {
                    out.push(self.string(loc, key, i.get_ref())?);
                }
                Some(out)
            }
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a list of strings"),
                    "write it as [\"a\", \"b\"]",
                );
                None
            }
        }
    }
    pub fn duration(&mut self, loc: Loc, key: &str, v: &DeValue<'_>) -> Option<Option<Duration>> {
        let s = match v {
            DeValue::Integer(i) => i.as_str().to_string(),
            DeValue::String(s) => s.to_string(),
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a time span"),
                    "write e.g. \"30s\", \"500ms\", \"2min\" or \"infinity\"",
                );
                return None;
            }
        };
        if s == "infinity" {
            return Some(None);
        }
        match parse_duration(&s) {
            Ok(d) => Some(Some(d)),
            Err(m) => {
                self.err(
                    loc,
                    key,
                    format!("{key} = {s}: {m}"),
                    "write e.g. \"30s\", \"500ms\", \"2min\" or \"infinity\"",
                );
                None
            }
        }
    }
    pub fn count(
        &mut self,
        loc: Loc,
        key: &str,
        v: &DeValue<'_>,
        min: u64,
        max: u64,
    ) -> Option<u64> {
        let n = match v {
            DeValue::Integer(i) => i.as_str().replace('_', "").parse::<i64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n >= min as i64 && n <= max as i64 => Some(n as u64),
            _ => {
                self.err(
                    loc,
                    key,
                    format!("{key} must be a whole number from {min} to {max}"),
                    "",
                );
                None
            }
        }
    }
}
