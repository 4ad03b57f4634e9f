//! The completions for bash, zsh and fish, made by clap_complete.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap_complete::Shell;

use crate::{Program, programs, write};

/// The shells completions are made for, and where each looks for them under a
/// prefix's `share` (as Debian's bash-completion, zsh and fish packages read).
pub const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "bash-completion/completions"),
    (Shell::Zsh, "zsh/vendor-completions"),
    (Shell::Fish, "fish/vendor_completions.d"),
];

/// The file name `shell` looks for `program`'s completions under.
pub fn completion_file(shell: Shell, program: &str) -> String {
    match shell {
        Shell::Zsh => format!("_{program}"),
        Shell::Fish => format!("{program}.fish"),
        _ => program.to_owned(),
    }
}

/// Writes every program's completions for each shell into `dir`, in the shells'
/// directories of [`SHELLS`]; returns the files.
pub fn write_completions(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    write_completions_of(dir, &programs())
}

/// [`write_completions`] for `programs` only.
pub fn write_completions_of(dir: &Path, programs: &[Program]) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (shell, sub) in SHELLS {
        let shell_dir = dir.join(sub);
        std::fs::create_dir_all(&shell_dir)
            .with_context(|| format!("cannot create {}", shell_dir.display()))?;
        for p in programs {
            let name = p.name().to_owned();
            let mut command = p.command.clone();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, &name, &mut script);
            let path = shell_dir.join(completion_file(shell, &name));
            write(&path, &script)?;
            written.push(path);
        }
    }
    Ok(written)
}
