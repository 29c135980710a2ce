//! Prometheus text exposition (format 0.0.4) of what `status` knows, and a small HTTP
//! server for it. Pure up to [`http`]: [`text`] writes families with their HELP and TYPE
//! lines and escapes label values, [`slices`] turns slice readings into families (a metric
//! a slice's hierarchy cannot give is left out, never reported as 0), and [`http`] answers
//! `GET /metrics` with whatever a render function returns, within fixed limits.

pub mod http;
pub mod slices;
pub mod text;

/// The Content-Type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
