//! Files that hold secrets (mgrpd's keys, the overlay's tokens): read only when no one
//! but their owner may read them, as ssh does its private keys.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// What a secret's path may start with to name a file systemd hands the service
/// (`LoadCredential=NAME:PATH` in its unit): `${CREDENTIALS_DIRECTORY}/NAME`. A
/// configuration's folder put before it is dropped.
pub const CREDENTIALS: &str = "${CREDENTIALS_DIRECTORY}";

/// `path` with [`CREDENTIALS`] replaced by `dir` (the `CREDENTIALS_DIRECTORY`
/// systemd gives the service), or `path` as it is when it does not name it.
pub fn credential_path(path: &Path, what: &str, dir: Option<&OsStr>) -> Result<PathBuf, String> {
    let text = path.to_string_lossy();
    let Some(at) = text.find(CREDENTIALS) else {
        return Ok(path.to_path_buf());
    };
    let rest = text[at + CREDENTIALS.len()..].trim_start_matches('/');
    match dir {
        Some(d) if !d.is_empty() && !rest.is_empty() => Ok(Path::new(d).join(rest)),
        Some(_) | None if rest.is_empty() => Err(format!(
            "{what} {text}: name the credential after {CREDENTIALS}/ (as LoadCredential=NAME:… names it)"
        )),
        _ => Err(format!(
            "{what} {CREDENTIALS}/{rest}: CREDENTIALS_DIRECTORY is not set; start the service under systemd with LoadCredential={rest}:FILE in its unit, or give the file's own path"
        )),
    }
}

/// The text of `path`, a `what` ("key file", "token file"), if only its owner may
/// read it; otherwise, or when it cannot be read, why, in words that say what to do.
/// A path that starts with [`CREDENTIALS`] reads the credential systemd handed over.
pub fn read_private(path: &Path, what: &str) -> Result<String, String> {
    let path = &credential_path(
        path,
        what,
        std::env::var_os("CREDENTIALS_DIRECTORY").as_deref(),
    )?;
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{what} {} has mode {mode:04o}, so others may read it; run `chmod 600 {}`",
            path.display(),
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_is_read_from_the_directory_systemd_gives() {
        let dir = Some(OsStr::new("/run/credentials/mgrp-overlay.service"));
        let got = |p: &str, d| credential_path(Path::new(p), "token file", d);
        assert_eq!(
            got("${CREDENTIALS_DIRECTORY}/token", dir).unwrap(),
            Path::new("/run/credentials/mgrp-overlay.service/token")
        );
        // Joined to the configuration's folder first: that folder is dropped.
        assert_eq!(
            got("/etc/mgrp/${CREDENTIALS_DIRECTORY}/tls-key", dir).unwrap(),
            Path::new("/run/credentials/mgrp-overlay.service/tls-key")
        );
        assert_eq!(
            got("/etc/mgrp/overlay.token", None).unwrap(),
            Path::new("/etc/mgrp/overlay.token")
        );
        let e = got("${CREDENTIALS_DIRECTORY}/token", None).unwrap_err();
        assert!(
            e.contains("CREDENTIALS_DIRECTORY is not set") && e.contains("LoadCredential=token:"),
            "{e}"
        );
        assert!(got("${CREDENTIALS_DIRECTORY}/", dir).is_err());
    }

    #[test]
    fn a_file_others_may_read_is_refused() {
        let path = std::env::temp_dir().join(format!("mgrp-rt-secret-{}", std::process::id()));
        std::fs::write(&path, "s3cret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = read_private(&path, "key file").unwrap_err();
        assert!(e.contains("mode 0640") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_private(&path, "key file").unwrap(), "s3cret\n");
        std::fs::remove_file(&path).unwrap();
        assert!(
            read_private(&path, "key file")
                .unwrap_err()
                .contains("cannot read")
        );
    }
}
