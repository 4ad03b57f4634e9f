//! `pathload-rs`: the pathload available-bandwidth tool, over MGRP or plain UDP.
//!
//! `snd` serves measurements; `rcv` drives one and prints the range. See `--help`.

fn main() {
    std::process::exit(pathload_rs::tool::main_with_args(std::env::args_os()));
}
