//! The mesh's matrix, collected (`[matrix]`): every interval the description is read
//! again and every member's API asked for its links; the matrix they give (each
//! pair measured or inferred, `crate::matrix`) is kept for `/v1/matrix`, the
//! `/matrix` page and the metrics.

use std::time::{Duration, Instant};

use mgrp_rt::lock;
use tracing::{debug, warn};

use crate::state::shared::Shared;

/// How long the thread sleeps between looks at the stop flag and the configuration.
const STEP: Duration = Duration::from_millis(200);

/// Collects while the configuration has `[matrix]` (a reload may set it or take it
/// away), until the node stops.
pub(crate) fn collect(s: &Shared) {
    let mut last: Option<Instant> = None;
    let mut failing = false;
    while !s.stopping() {
        let config = s.config();
        let Some(m) = &config.matrix else {
            *lock(&s.matrix) = None;
            last = None;
            std::thread::sleep(STEP);
            continue;
        };
        if last.is_some_and(|t| t.elapsed() < m.interval) {
            std::thread::sleep(STEP);
            continue;
        }
        last = Some(Instant::now());
        let got = m.description().and_then(|mesh| {
            crate::matrix::read_members(&mesh, &m.access).map_err(|e| format!("{e:#}"))
        });
        match &got {
            Ok(matrix) => {
                if failing {
                    warn!("matrix: collected again");
                }
                failing = false;
                for u in &matrix.unread {
                    debug!(member = %u.member, "matrix: cannot read its links: {}", u.error);
                }
            }
            Err(e) if !failing => {
                warn!(
                    "matrix: cannot collect: {e} (tried again every {:?})",
                    m.interval
                );
                failing = true;
            }
            Err(_) => {}
        }
        *lock(&s.matrix) = Some(got);
    }
}
