//! Files that hold secrets (mgrpd's keys, the overlay's tokens): read only when no one
//! but their owner may read them, as ssh does its private keys.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// The text of `path`, a `what` ("key file", "token file"), if only its owner may
/// read it; otherwise, or when it cannot be read, why, in words that say what to do.
pub fn read_private(path: &Path, what: &str) -> Result<String, String> {
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
