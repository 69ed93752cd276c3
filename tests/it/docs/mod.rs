//! The documentation held to the code: generated pages, keys, links and metrics, and
//! the `hookgate::testing` example run for real.

mod pages;
mod testing_api;
