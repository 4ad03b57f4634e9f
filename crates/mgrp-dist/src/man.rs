//! The man pages: one per program and one per subcommand, rendered by clap_mangen.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::{Program, programs, write};

/// Writes each program's man page into `dir` (`NAME.SECTION`), and one for each of
/// its subcommands (`NAME-SUB.SECTION`, as git's); returns the files.
pub fn write_man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    write_man_pages_of(dir, programs())
}

/// [`write_man_pages`] for `programs` only.
pub fn write_man_pages_of(dir: &Path, programs: Vec<Program>) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for p in programs {
        for (name, command) in pages(p.command) {
            let path = dir.join(format!("{name}.{}", p.section));
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .section(p.section)
                .render(&mut page)
                .with_context(|| format!("cannot render the man page of {name}"))?;
            write(&path, &page)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// The pages of `command`: its own, then each visible subcommand's (but `help`),
/// named after the path to it.
pub fn pages(command: clap::Command) -> Vec<(String, clap::Command)> {
    let mut command = command;
    command.build();
    let mut out = Vec::new();
    collect(command.get_name(), &command, &mut out);
    out
}

fn collect(name: &str, command: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
    out.push((name.to_owned(), command.clone().name(name.to_owned())));
    for sub in command.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        collect(&format!("{name}-{}", sub.get_name()), sub, out);
    }
}
