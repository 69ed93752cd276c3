//! The command line against real gateways: the commands after the walk, `hookgate
//! deliveries`, and capture, sign and replay.

mod commands;
mod deliveries;
mod replay;
