//! The config file as written, before validation. Every struct denies unknown keys, and every
//! value that validation may reject keeps its location (`Spanned`).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub global: RawGlobal,
    #[serde(default)]
    pub listeners: BTreeMap<Spanned<String>, RawListener>,
    #[serde(default)]
    pub upstreams: BTreeMap<Spanned<String>, RawUpstream>,
}

/// `[global]`: process-wide settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGlobal {
    /// Worker threads (the command line's `--workers` wins).
    pub workers: Option<Spanned<i64>>,
    /// Pin worker i to core i (the command line's `--pin` also turns it on).
    pub pin: Option<bool>,
    pub drain_timeout: Option<Spanned<String>>,
    pub session_log: Option<Spanned<String>>,
}

/// `[listeners.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    pub bind: Spanned<String>,
    pub protocol: Option<Spanned<String>>,
    pub upstream: Spanned<String>,
    pub max_connections: Option<Spanned<i64>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub buffer_size: Option<Spanned<String>>,
    #[serde(default)]
    pub proxy_protocol_from: Vec<Spanned<String>>,
    pub proxy_header_timeout: Option<Spanned<String>>,
}

/// `[upstreams.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub targets: Spanned<Vec<Spanned<RawTarget>>>,
    pub balance: Option<Spanned<String>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub connect_attempts: Option<Spanned<i64>>,
    pub send_proxy_protocol: Option<Spanned<String>>,
    pub passive_backoff: Option<Spanned<String>>,
    pub passive_backoff_max: Option<Spanned<String>>,
    pub health_check: Option<RawHealthCheck>,
}

/// A target: `"host:port"` or `{ address = "host:port", weight = 3 }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawTarget {
    Address(String),
    Detailed(RawTargetTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTargetTable {
    pub address: String,
    pub weight: Option<i64>,
}

/// `[upstreams.NAME.health_check]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    pub interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub rise: Option<Spanned<i64>>,
    pub fall: Option<Spanned<i64>>,
}
