//! Typed reads of a client's JSON fields: `null` reads as absent, and a wrong type is a
//! [`RequestError::Invalid`] naming the field by its JSON path (built only on error).

use std::fmt::Display;

use serde_json::{Map, Number, Value};

use crate::request::RequestError;

/// A field's JSON path (`"model"`, `&format_args!("messages[{i}].content")`).
pub(crate) type Param<'a> = &'a dyn Display;

/// `param` is wrong: `reason`.
pub(crate) fn invalid(param: Param<'_>, reason: impl Into<String>) -> RequestError {
    RequestError::Invalid {
        param: param.to_string(),
        reason: reason.into(),
    }
}

pub(crate) fn string(v: Value, param: Param<'_>) -> Result<Option<String>, RequestError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        _ => Err(invalid(param, "must be a string")),
    }
}

/// A string that must be there.
pub(crate) fn required_string(v: Option<Value>, param: Param<'_>) -> Result<String, RequestError> {
    string(v.unwrap_or(Value::Null), param)?.ok_or_else(|| invalid(param, "is required"))
}

pub(crate) fn boolean(v: &Value, param: Param<'_>) -> Result<Option<bool>, RequestError> {
    match v {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        _ => Err(invalid(param, "must be a boolean")),
    }
}

pub(crate) fn uint(v: &Value, param: Param<'_>) -> Result<Option<u64>, RequestError> {
    match v {
        Value::Null => Ok(None),
        v => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| invalid(param, "must be a non-negative integer")),
    }
}

pub(crate) fn int(v: &Value, param: Param<'_>) -> Result<Option<i64>, RequestError> {
    match v {
        Value::Null => Ok(None),
        v => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| invalid(param, "must be an integer")),
    }
}

pub(crate) fn number(v: Value, param: Param<'_>) -> Result<Option<Number>, RequestError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => Ok(Some(n)),
        _ => Err(invalid(param, "must be a number")),
    }
}

pub(crate) fn object(
    v: Value,
    param: Param<'_>,
) -> Result<Option<Map<String, Value>>, RequestError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) => Ok(Some(m)),
        _ => Err(invalid(param, "must be an object")),
    }
}

/// An object that must be there.
pub(crate) fn required_object(
    v: Option<Value>,
    param: Param<'_>,
) -> Result<Map<String, Value>, RequestError> {
    object(v.unwrap_or(Value::Null), param)?.ok_or_else(|| invalid(param, "is required"))
}

pub(crate) fn array(v: Value, param: Param<'_>) -> Result<Option<Vec<Value>>, RequestError> {
    match v {
        Value::Null => Ok(None),
        Value::Array(a) => Ok(Some(a)),
        _ => Err(invalid(param, "must be an array")),
    }
}

/// A string or an array of strings (OpenAI `stop`).
pub(crate) fn strings(v: Value, param: Param<'_>) -> Result<Vec<String>, RequestError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::String(s) => Ok(vec![s]),
        Value::Array(a) => a
            .into_iter()
            .map(|s| match s {
                Value::String(s) => Ok(s),
                _ => Err(invalid(param, "must be a string or an array of strings")),
            })
            .collect(),
        _ => Err(invalid(param, "must be a string or an array of strings")),
    }
}

/// A number other than zero (penalties: zero is the default and means nothing).
pub(crate) fn nonzero(n: Option<Number>) -> Option<Number> {
    n.filter(|n| n.as_f64() != Some(0.0))
}
