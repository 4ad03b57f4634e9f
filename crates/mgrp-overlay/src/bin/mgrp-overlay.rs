//! The `mgrp-overlay` command: one node of the Measurement Overlay.

fn main() -> std::process::ExitCode {
    mgrp_overlay::cli::main_with_args(std::env::args_os())
}
