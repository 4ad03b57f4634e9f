//! Standard output for the workspace's commands, which must not panic when the reader
//! goes away (`mgrp-overlay --check-config FILE | head`, `pathload-rs rcv --json |
//! head -1`). Rust ignores SIGPIPE, so `println!` panics on a closed pipe; these write
//! instead, and a command whose reader has gone ends quietly with status 0, as a Unix
//! tool does when its reader stops listening. Long-running daemons never write to
//! standard output but through these.

use std::io::{ErrorKind, Write as _};

/// Writes `args` and a newline to standard output; see [`crate::outln`].
pub fn write_line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}") {
        gone(&e);
    }
}

/// Writes `args` to standard output and flushes it; see [`crate::out`].
pub fn write(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        gone(&e);
    }
}

fn gone(e: &std::io::Error) {
    if e.kind() == ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    // Another failure (a full disk behind a redirect) is not worth a panic either;
    // say it once on standard error.
    eprintln!("cannot write to standard output: {e}");
}

/// `println!` that ends the process quietly when standard output's reader has gone.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::stdout::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write_line(format_args!($($arg)*))
    };
}

/// `print!` (flushed) that ends the process quietly when standard output's reader has
/// gone.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*))
    };
}
