//! The `mgrpd` binary: parses flags and configuration, then runs the daemon.

fn main() -> std::process::ExitCode {
    mgrpd::main_with_args(std::env::args_os())
}
