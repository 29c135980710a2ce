//! TOML values as the directive checks take them: scalars, lists, tables.

use crate::directives::{Raw, Scalar};
use toml::de::DeValue;

fn to_scalar(v: &DeValue<'_>) -> Result<Scalar, String> {
    Ok(match v {
        DeValue::String(s) => Scalar::Str(s.to_string()),
        DeValue::Integer(i) => Scalar::Int(
            i128::from_str_radix(&i.as_str().replace('_', ""), i.radix())
                .map_err(|_| format!("'{}' is not a valid integer", i.as_str()))?,
        ),
        DeValue::Float(f) => Scalar::Float(
            f.as_str()
                .replace('_', "")
                .parse()
                .map_err(|_| format!("'{}' is not a valid number", f.as_str()))?,
        ),
        DeValue::Boolean(b) => Scalar::Bool(*b),
        DeValue::Datetime(_) => return Err("a date is not a valid value here".into()),
        DeValue::Array(_) | DeValue::Table(_) => {
            return Err("expected a single value, not a list or table".into())
        }
    })
}

pub fn to_raw(v: &DeValue<'_>) -> Result<Raw, String> {
    match v {
        DeValue::Array(a) => a
            .iter()
            .map(|i| to_scalar(i.get_ref()))
            .collect::<Result<_, _>>()
            .map(Raw::List),
        DeValue::Table(t) => t
            .iter()
            .map(|(k, v)| Ok((k.get_ref().to_string(), to_scalar(v.get_ref())?)))
            .collect::<Result<_, String>>()
            .map(Raw::Table),
        other => to_scalar(other).map(Raw::Scalar),
    }
}
