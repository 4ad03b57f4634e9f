//! The `badabing-rs` command: see `pathchirp-rs --help`.

fn main() {
    std::process::exit(badabing_rs::tool::main_with_args(std::env::args_os()));
}
