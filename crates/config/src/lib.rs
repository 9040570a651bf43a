//! Rampart configuration.
//!
//! Text goes in (a TOML file, a hosts file, or command-line targets) and a data-plane
//! [`Snapshot`](rampart_model::Snapshot) comes out, or a list of errors each pointing at
//! `file:line:col`. The stages are:
//!
//! - [`raw`]: serde structs that mirror the file (`RawXxx`); unknown keys are errors.
//! - [`units`]: durations (`"5s"`, `"1m30s"`) and sizes (`"64KiB"`).
//! - [`load`]: a config file with its `include`d files and `${VAR}` references ([`env`]),
//!   each file's errors at its own `file:line:col`.
//! - [`compile`]: validation and compilation into a snapshot, reusing the health state and
//!   connection counters of the running config ([`LiveState`]) so a reload keeps them.
//! - [`hosts`]: the zero-config `hosts` file.
#![forbid(unsafe_code)]

pub mod compile;
pub mod env;
pub mod error;
pub mod hosts;
pub mod load;
pub mod raw;
pub mod units;

pub use compile::{
    compile_toml, simple_l4, AdminAddress, AdminSettings, Compiled, LiveState, LogFormat, LogLevel, LogSettings,
    SimpleAcme, SimpleL4, SimpleTracing,
};
pub use error::{ConfigError, ConfigErrors};
pub use load::{compile_config, compile_config_env, ConfigSource, LoadedConfig, WatchList};
