//! The one way the commands write: `outln!` and `out!` for standard output, `errln!` for
//! standard error. Nothing here panics on I/O (unlike `println!`): a closed standard output
//! (`pmo list | head -1`) becomes [`StdoutClosed`], which `main` turns into a quiet exit, and
//! any other write error becomes an ordinary error.

use std::io::Write;

/// The reader of standard output went away (EPIPE): stop quietly, as Unix tools do.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output is closed")
    }
}
impl std::error::Error for StdoutClosed {}

/// Map a write error on standard output.
pub fn stdout_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        StdoutClosed.into()
    } else {
        anyhow::anyhow!(
            "cannot write to standard output: {}",
            crate::errtext::io(&e)
        )
    }
}

/// Write to standard output; see `outln!`.
pub fn stdout(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(stdout_error)
}

/// Write bytes to standard output and flush.
pub fn stdout_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(bytes)
        .and_then(|()| o.flush())
        .map_err(stdout_error)
}

/// Write to standard error, ignoring failures (there is nowhere left to report them).
pub fn stderr(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `println!` that returns `anyhow::Result<()>` instead of panicking.
macro_rules! outln {
    () => { $crate::out::stdout(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::stdout(format_args!("{}\n", format_args!($($t)*))) };
}

/// `print!` that returns `anyhow::Result<()>` instead of panicking.
macro_rules! out {
    ($($t:tt)*) => { $crate::out::stdout(format_args!($($t)*)) };
}

/// `eprintln!` that never panics.
macro_rules! errln {
    ($($t:tt)*) => { $crate::out::stderr(format_args!("{}\n", format_args!($($t)*))) };
}
