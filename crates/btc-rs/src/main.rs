//! The `btc-rs` command: see `btc-rs --help`.

fn main() {
    std::process::exit(btc_rs::tool::main_with_args(std::env::args_os()));
}
