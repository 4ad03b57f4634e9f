//! `[matrix]`: this node collects the whole mesh's matrix (docs/mesh.md) from every
//! member's API, serves it at `/v1/matrix` and `/matrix`, and exports it as metrics.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::check::{ConfigError, invalid};
use crate::matrix::Access;

/// How often the members are read unless told otherwise.
pub(super) const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct MatrixFile {
    /// The description whose members it reads (a file or an `https://` URL); the
    /// node's own `mesh` unless given.
    mesh: Option<String>,
    /// How often it reads them.
    interval: Option<String>,
    /// A token the members' APIs ask for.
    token_file: Option<PathBuf>,
    /// The authority that signed the certificates of members served over TLS.
    ca_file: Option<PathBuf>,
    /// Whether `/metrics` carries the matrix (two series per pair).
    metrics: Option<bool>,
}

/// The collector's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixSettings {
    /// The description: a file or URL.
    pub mesh: String,
    /// What fetching a URL needs (the node's `mesh-ca-file`, `mesh-token-file`
    /// when the description is its own).
    pub mesh_ca_file: Option<PathBuf>,
    pub mesh_token_file: Option<PathBuf>,
    /// The configuration's directory, for relative paths.
    pub dir: Option<PathBuf>,
    /// How often the members are read.
    pub interval: Duration,
    /// How the members' APIs are reached.
    pub access: Access,
    /// Whether `/metrics` carries the matrix.
    pub metrics: bool,
}

impl MatrixSettings {
    /// The description as it is now.
    pub fn description(&self) -> Result<mgrp_mesh::Mesh, String> {
        let text = mgrp_service::fetch::Source {
            mesh: &self.mesh,
            ca_file: self.mesh_ca_file.as_deref(),
            token_file: self.mesh_token_file.as_deref(),
            dir: self.dir.as_deref(),
        }
        .read()?;
        mgrp_mesh::Mesh::parse(&text).map_err(|e| format!("mesh {}: {e}", self.mesh))
    }
}

/// Checks `[matrix]`; `own` is the node's `mesh` with its fetch settings.
pub(super) fn check(
    f: MatrixFile,
    own: (Option<&String>, Option<&Path>, Option<&Path>),
    dir: Option<&Path>,
) -> Result<MatrixSettings, ConfigError> {
    let (mesh, ca, token) = match (f.mesh, own.0) {
        (Some(m), _) => (m, None, None),
        (None, Some(m)) => (m.clone(), own.1, own.2),
        (None, None) => {
            return Err(invalid(
                "matrix: give mesh (the description whose members it reads), or this node's own mesh".into(),
            ));
        }
    };
    let interval = match &f.interval {
        None => DEFAULT_INTERVAL,
        Some(t) => {
            let d = mgrp_core::parse_duration(t)
                .map_err(|e| invalid(format!("matrix.interval: {e}")))?;
            if d < Duration::from_secs(1) {
                return Err(invalid(format!("matrix.interval: {t}; use at least 1s")));
            }
            d
        }
    };
    let in_dir = |p: &Path| match dir {
        Some(d) if p.is_relative() => d.join(p),
        _ => p.to_path_buf(),
    };
    let access = Access::load(
        f.token_file.as_deref().map(in_dir).as_deref(),
        f.ca_file.as_deref().map(in_dir).as_deref(),
    )
    .map_err(|e| invalid(format!("matrix.{e}")))?;
    let settings = MatrixSettings {
        mesh,
        mesh_ca_file: ca.map(Path::to_path_buf),
        mesh_token_file: token.map(Path::to_path_buf),
        dir: dir.map(Path::to_path_buf),
        interval,
        access,
        metrics: f.metrics.unwrap_or(true),
    };
    // A description that cannot be read now is most likely a mistake: say so at
    // start rather than at the first collection.
    settings
        .description()
        .map_err(|e| invalid(format!("matrix.mesh: {e}")))?;
    Ok(settings)
}
