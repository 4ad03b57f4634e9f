//! Prometheus' targets from the description: one `file_sd` target group per member,
//! for each of the two jobs (the overlay's API, mgrpd's exporter), labelled with the
//! member's name.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::Mesh;

/// The label every target group gives its member's name, in both jobs.
pub const MEMBER_LABEL: &str = "member";

/// One target group of a `file_sd` file: `{"targets": [...], "labels": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetGroup {
    /// `HOST:PORT`s.
    pub targets: Vec<String>,
    /// The labels of every series scraped from them.
    pub labels: BTreeMap<String, String>,
}

impl TargetGroup {
    fn of(member: &str, target: &str, scheme: Option<&str>) -> Self {
        let mut labels = BTreeMap::from([(MEMBER_LABEL.to_owned(), member.to_owned())]);
        if let Some(s) = scheme {
            labels.insert("__scheme__".to_owned(), s.to_owned());
        }
        Self {
            targets: vec![target.to_owned()],
            labels,
        }
    }
}

impl Mesh {
    /// The overlays' APIs of the members that give one (`api`), each with its scheme
    /// (`__scheme__`, so a mesh may mix `http` and `https`).
    pub fn overlay_targets(&self) -> Vec<TargetGroup> {
        self.members
            .values()
            .filter_map(|m| {
                let a = m.api.as_ref()?;
                Some(TargetGroup::of(
                    &m.name,
                    a.target(),
                    Some(if a.tls { "https" } else { "http" }),
                ))
            })
            .collect()
    }

    /// The mgrpd exporters of the members that give one (`metrics`); mgrpd serves
    /// them in clear HTTP.
    pub fn mgrpd_targets(&self) -> Vec<TargetGroup> {
        self.members
            .values()
            .filter_map(|m| Some(TargetGroup::of(&m.name, m.metrics.as_ref()?, None)))
            .collect()
    }
}
