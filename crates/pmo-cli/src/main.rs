//! `pmo`: create, inspect and use pools of Persistent Memory Objects.
//!
//! Exit codes: 0 success; 1 usage or user error (wrong key, no such PMO, pool full, ...);
//! 2 integrity or corruption. Errors are one line on stderr.

mod assets;
#[macro_use]
mod out;
mod bench;
mod cmd;
mod common;
mod demo;
mod envcheck;
mod errtext;
mod fs;
mod keysrc;
mod life;
mod lmdb;
mod pmos;
mod pools;
mod resize;
mod text;

use std::process::ExitCode;

fn main() -> ExitCode {
    cmd::main()
}
