//! The real `hookgate` binary and how it is deployed: `check`, a crash, signals,
//! shutdown, and the files in deploy/.

pub mod binary;
mod deploy;
