//! Helpers shared by the CLI's integration tests.

use std::io::{ErrorKind, Write};
use std::process::ChildStdin;

/// Write `data` to a child's stdin and close it. A child that exits before reading its input
/// (a usage error refused before the command starts) closes the pipe first: that `BrokenPipe` is
/// the child's business, judged by its exit code and stderr, not a failure of the test harness.
pub fn feed(stdin: Option<ChildStdin>, data: &[u8]) {
    let mut input = stdin.expect("the child's stdin was piped");
    match input.write_all(data) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => panic!("writing the child's stdin: {e}"),
        _ => {}
    }
}
