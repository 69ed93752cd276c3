//! The real `hookgate` binary and how it is deployed: `check`, a crash, signals,
//! shutdown, the disk store's journal torn by a crash, and the files in deploy/ (the
//! Prometheus alert rules with promtool).

mod alerts;
pub mod binary;
mod deploy;
mod journal;
