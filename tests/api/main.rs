//! Integration tests: the real service over HTTP, one test binary.

mod assistants;
mod auth;
mod cli;
mod health;
mod helpers;
mod isolation;
mod keys;
mod persistence;
mod presets;
mod secrets;
mod servers;
mod validation;
