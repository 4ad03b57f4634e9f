//! Each link's history on disk, so that a restart keeps it: one small JSON file per
//! link in the configured `state-dir`, holding the link's run counts, probe bytes,
//! last error and its last `history` runs (the same bound as in memory). A file is
//! written whole to a temporary name, synced and renamed over the old one, so a crash
//! leaves the old file or the new one, never a torn one. A file that cannot be read
//! is set aside (renamed `.bad`) and named in the log, not trusted and not lost.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use mgrp_views::estimate::{Estimate, RunCounts};

/// The format of a link's file; another version is set aside, not read.
const VERSION: u32 = 1;

/// What is kept of a link between runs and across restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// Its last runs, oldest first.
    pub(crate) history: VecDeque<Estimate>,
    /// Runs by outcome.
    pub(crate) runs: RunCounts,
    /// IP bytes of every probe its runs sent.
    pub(crate) probe_bytes: u64,
    /// IP bytes of those that carried application traffic.
    pub(crate) riding_probe_bytes: u64,
    /// Why the last run failed, if it did.
    pub(crate) last_error: Option<String>,
    /// Passive estimates recorded in place of due runs.
    #[serde(default)]
    pub(crate) passive: u64,
}

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
    link: String,
    #[serde(flatten)]
    record: Record,
}

/// The directory of the links' files.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (creating) `dir`, readable by its owner only.
    pub(crate) fn open(dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    fn path(&self, link: &str) -> PathBuf {
        // Link names are letters, digits, '.', ':', '_' and '-' (the config checks),
        // and never "." or "..": a file name of their own.
        self.dir.join(format!("{link}.json"))
    }

    /// Link `link`'s record, keeping its last `keep` runs; `Ok(None)` when it has
    /// none yet. A file that does not parse is renamed `.bad` and reported.
    pub(crate) fn load(&self, link: &str, keep: usize) -> Result<Option<Record>, String> {
        let path = self.path(link);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        match serde_json::from_str::<File>(&text) {
            Ok(f) if f.version == VERSION && f.link == link => {
                let mut r = f.record;
                while r.history.len() > keep {
                    r.history.pop_front();
                }
                Ok(Some(r))
            }
            parsed => {
                let why = match parsed {
                    Ok(f) => format!("version {} of link {:?}", f.version, f.link),
                    Err(e) => e.to_string(),
                };
                let bad = path.with_extension("json.bad");
                let moved = std::fs::rename(&path, &bad);
                Err(format!(
                    "{} is not this link's history ({why}); {}",
                    path.display(),
                    match moved {
                        Ok(()) => format!("set aside as {}, starting afresh", bad.display()),
                        Err(e) => format!("could not set it aside ({e})"),
                    }
                ))
            }
        }
    }

    /// Moves the record kept under the name `old` to `new` (each run in it renamed
    /// too) when `new` has none, keeping its last `keep` runs: a link renamed (by a
    /// mesh description) keeps its history. `Ok(None)` when there was nothing to move.
    pub(crate) fn rename(
        &self,
        old: &str,
        new: &str,
        keep: usize,
    ) -> Result<Option<Record>, String> {
        if self.path(new).exists() {
            return Ok(None);
        }
        let Some(mut r) = self.load(old, keep)? else {
            return Ok(None);
        };
        for e in &mut r.history {
            e.link = new.to_owned();
        }
        self.save(new, &r)
            .map_err(|e| format!("cannot keep {old}'s history as {new}'s: {e}"))?;
        let _ = std::fs::remove_file(self.path(old));
        Ok(Some(r))
    }

    /// Writes link `link`'s record: to a temporary file, synced, renamed over the
    /// old one.
    pub(crate) fn save(&self, link: &str, record: &Record) -> std::io::Result<()> {
        let path = self.path(link);
        let tmp = self.dir.join(format!(".{link}.json.tmp"));
        let text = serde_json::to_vec(&File {
            version: VERSION,
            link: link.to_string(),
            record: record.clone(),
        })
        .map_err(std::io::Error::other)?;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_views::estimate::RunOutcome;

    /// A filled run of link n1 (every field, so that a field the file drops fails).
    fn estimate(seq: u64) -> Estimate {
        Estimate {
            link: "n1".into(),
            seq,
            ..mgrp_views::sample::estimate()
        }
    }

    #[test]
    fn a_record_comes_back_as_it_was_saved_bounded_and_a_bad_file_is_set_aside() {
        let dir = std::env::temp_dir().join(format!("overlay-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.load("n1", 10), Ok(None));
        let mut r = Record::default();
        for seq in 1..=5 {
            r.history.push_back(estimate(seq));
            r.runs.add(RunOutcome::Estimate);
        }
        r.probe_bytes = 5000;
        r.last_error = Some("x".into());
        store.save("n1", &r).unwrap();
        assert_eq!(store.load("n1", 10).unwrap().as_ref(), Some(&r));
        let kept = store.load("n1", 2).unwrap().unwrap();
        assert_eq!(
            kept.history.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [4, 5]
        );
        assert_eq!(kept.runs.get(RunOutcome::Estimate), 5);
        // Another link's file under this name, or garbage, is not trusted.
        std::fs::write(dir.join("n2.json"), "{\"version\": 1, \"link\": \"n1\"").unwrap();
        let e = store.load("n2", 10).unwrap_err();
        assert!(e.contains("set aside"), "{e}");
        assert!(dir.join("n2.json.bad").exists());
        assert_eq!(store.load("n2", 10), Ok(None));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
