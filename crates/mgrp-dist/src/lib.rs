//! The man pages and shell completions (bash, zsh, fish) of every program mgrp
//! installs, made from the programs' own command lines, so that a flag added to a
//! program is in its page and its completions at the next build; and the Debian
//! packages that install them with the programs, units and examples. The
//! `mgrp-dist` program writes them.

use std::path::Path;

use anyhow::Context as _;

mod completions;
pub mod deb;
mod man;

pub use completions::{SHELLS, completion_file, write_completions, write_completions_of};
pub use man::{pages, write_man_pages, write_man_pages_of};

/// A program mgrp installs.
#[derive(Debug, Clone)]
pub struct Program {
    /// Its command line.
    pub command: clap::Command,
    /// Its manual section: 8 for the daemons an administrator runs, 1 for the rest.
    pub section: &'static str,
}

impl Program {
    /// The program's name.
    pub fn name(&self) -> &str {
        self.command.get_name()
    }
}

/// Every program, with its section.
pub fn programs() -> Vec<Program> {
    let daemon = |command| Program {
        command,
        section: "8",
    };
    let tool = |command| Program {
        command,
        section: "1",
    };
    vec![
        daemon(<mgrpd::config::Cli as clap::CommandFactory>::command()),
        tool(mgrpd::ctl::command()),
        daemon(mgrp_overlay::cli::command()),
        tool(pathload_rs::tool::command()),
        tool(pathchirp_rs::tool::command()),
        tool(badabing_rs::tool::command()),
        tool(btc_rs::tool::command()),
    ]
}

/// Writes `bytes` to `path`, saying which file could not be written.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}
