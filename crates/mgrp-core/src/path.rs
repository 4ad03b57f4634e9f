//! The words for what was learned of a path that more than one crate speaks: where its
//! queues form (btc-rs measures it, the overlay's prediction scales by it, the API
//! serves it) and what a transfer-rate prediction rests on. Kept here, below the tools
//! and the API's views, so a view of a path needs no measurement tool.

use serde::{Deserialize, Serialize};

/// Where the path's queues form, as btc-rs's squeezed pairs read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathClass {
    /// At the narrow link (the seed scaled pathload by 0.2 there).
    TightLikeNarrow,
    /// At a faster link elsewhere (the seed: 0.6).
    TightUnlikeNarrow,
    /// The score was 0.
    Undecided,
}

/// Where a prediction came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// The available-bandwidth range scaled by the squeezed-pair class.
    ScaledAbw,
    /// Mathis's bound from measured loss and round trip (Reno-like).
    Mathis,
    /// The kernel's delivery rate of a running, network-limited connection.
    Kernel,
}

impl Basis {
    /// Every basis.
    pub const ALL: [Self; 3] = [Self::ScaledAbw, Self::Mathis, Self::Kernel];

    /// The basis of that name, if this version has it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Its name in JSON and in metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::ScaledAbw => "scaled-abw",
            Self::Mathis => "mathis",
            Self::Kernel => "kernel",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_basis_is_named_in_json_as_in_its_labels() {
        for b in Basis::ALL {
            assert_eq!(serde_json::to_value(b).unwrap(), b.name());
            assert_eq!(Basis::from_name(b.name()), Some(b));
        }
        assert_eq!(Basis::from_name("bbr-share"), None);
    }
}
