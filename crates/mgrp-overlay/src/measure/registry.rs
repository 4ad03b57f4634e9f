//! Every method a link may be measured with, listed once: a new method is a file
//! beside this one implementing [`MethodRun`] and its line in `METHODS`.

use std::sync::LazyLock;

use serde::Deserialize;

use super::method::{Gives, MethodRun, Run};
use mgrp_views::estimate::{Estimate, RunOutcome};

/// The methods, in the order `--help` and errors list them; the first is the
/// default.
static METHODS: [&dyn MethodRun; 5] = [
    &super::pathload::FAST,
    &super::pathload::SLOW,
    &super::pathchirp::Pathchirp,
    &super::badabing::Badabing,
    &super::btc::Btc,
];

/// Their names, for the configuration's error that lists them.
static NAMES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| METHODS.iter().map(|m| m.name()).collect());

/// How a link is measured: one of `METHODS`.
#[derive(Clone, Copy)]
pub struct Method(&'static dyn MethodRun);

impl Method {
    /// The method named `name`.
    pub fn named(name: &str) -> Option<Self> {
        METHODS.iter().find(|m| m.name() == name).map(|m| Self(*m))
    }

    /// Every method's name.
    pub fn names() -> &'static [&'static str] {
        &NAMES
    }

    /// The name the configuration, the API and the metrics use.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// What its estimates give.
    pub fn gives(self) -> Gives {
        self.0.gives()
    }

    /// How its runs share a path.
    pub fn class(self) -> super::schedule::Class {
        self.0.class()
    }

    /// What a run costs a mesh's probe budget, and how it shares a path.
    pub fn cost(self) -> mgrp_mesh::budget::MethodCost {
        let c = self.0.cost();
        mgrp_mesh::budget::MethodCost {
            bytes_per_run: c.bytes,
            time_limit: c.time_limit,
            exclusive: self.class() == super::schedule::Class::Exclusive,
            available_bandwidth: self.gives() == Gives::AvailableBandwidth,
        }
    }

    /// Every method's cost, by name.
    pub fn costs() -> std::collections::BTreeMap<String, mgrp_mesh::budget::MethodCost> {
        METHODS
            .iter()
            .map(|m| (m.name().to_owned(), Self(*m).cost()))
            .collect()
    }

    /// Whether a link left unnamed is named after it.
    pub fn in_default_names(self) -> bool {
        self.0.in_default_names()
    }

    /// One run.
    pub fn run(self, run: &Run<'_>) -> (Estimate, RunOutcome) {
        self.0.run(run)
    }
}

impl Default for Method {
    fn default() -> Self {
        Self(METHODS[0])
    }
}

impl PartialEq for Method {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Method {}

impl std::fmt::Debug for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Method {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::named(&name).ok_or_else(|| serde::de::Error::unknown_variant(&name, &NAMES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_is_found_by_its_own_name_once() {
        for m in &METHODS {
            let found = Method::named(m.name()).unwrap();
            assert_eq!(found.name(), m.name());
            assert_eq!(NAMES.iter().filter(|n| **n == m.name()).count(), 1);
        }
        assert_eq!(Method::default().name(), "pathload-fast");
        assert!(Method::named("pathlaod").is_none());
    }
}
