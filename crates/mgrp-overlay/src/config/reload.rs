//! A configuration read again while the node runs (SIGHUP), set against the one in
//! force: which links go on as they were, which are new, which go, and which settings
//! only a restart can change. No I/O: the node applies the plan.
//!
//! A reload applies the links, whom this node serves and how much (`[serve] allow`,
//! `max-mb-per-hour`, `max-probe-rate`, the measurements and connections it serves at
//! once), `max-running`, the API's token and
//! `probe-port-base` (for new links). A link that measures as it did (every setting
//! the same, [`super::Link::same_measurement`]) keeps its probe port, its schedule, a run in
//! flight and its history; a new link takes the first free probe port from the base.
//! Every other setting keeps its value in force, and the plan names it.

use super::{Config, link};

/// What a reload puts in force.
#[derive(Debug, Clone, PartialEq)]
pub struct ReloadPlan {
    /// The configuration to run: the new one, with what needs a restart as it was.
    pub config: Config,
    /// For each of its links, the index among the old links of the one it continues.
    pub carry: Vec<Option<usize>>,
    /// Links that are new.
    pub added: Vec<String>,
    /// Links that are gone.
    pub removed: Vec<String>,
    /// Links of a name that was there, measuring otherwise now: the old one goes and
    /// the new one starts.
    pub changed: Vec<String>,
    /// The settings (as the file names them) that changed and need a restart.
    pub need_restart: Vec<&'static str>,
}

impl ReloadPlan {
    /// The links whose runs in flight end: those gone or changed.
    pub fn ended(&self) -> Vec<String> {
        self.removed.iter().chain(&self.changed).cloned().collect()
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.carry.iter().enumerate().all(|(j, c)| *c == Some(j))
    }
}

/// Puts back what `old` has for a setting that needs a restart, and names it.
fn keep<T: PartialEq + Clone>(
    need_restart: &mut Vec<&'static str>,
    key: &'static str,
    old: &T,
    new: &mut T,
) {
    if old != new {
        need_restart.push(key);
        new.clone_from(old);
    }
}

/// The plan for `new` read while `old` is in force.
pub fn plan(old: &Config, mut new: Config) -> Result<ReloadPlan, String> {
    let mut n = Vec::new();
    keep(&mut n, "name", &old.name, &mut new.name);
    keep(&mut n, "listen", &old.listen, &mut new.listen);
    keep(&mut n, "tls-cert and tls-key", &old.tls, &mut new.tls);
    keep(&mut n, "open-api", &old.open_api, &mut new.open_api);
    keep(&mut n, "socket", &old.socket, &mut new.socket);
    keep(&mut n, "history", &old.history, &mut new.history);
    keep(&mut n, "state-dir", &old.state_dir, &mut new.state_dir);
    keep(
        &mut n,
        "[serve] transports and ports",
        &old.serve,
        &mut new.serve,
    );
    keep(
        &mut n,
        "[serve] piggyback",
        &old.serve_piggyback,
        &mut new.serve_piggyback,
    );
    keep(
        &mut n,
        "[serve] ipv6-prefix",
        &old.serve_ipv6_prefix,
        &mut new.serve_ipv6_prefix,
    );
    keep(&mut n, "[btc]", &old.prediction, &mut new.prediction);
    keep(&mut n, "[passive] enabled", &old.passive, &mut new.passive);
    keep(
        &mut n,
        "[passive] timing",
        &old.passive_timing,
        &mut new.passive_timing,
    );
    keep(&mut n, "[routing]", &old.routing, &mut new.routing);
    keep(
        &mut n,
        "mesh-refresh",
        &old.mesh_refresh,
        &mut new.mesh_refresh,
    );
    // With a token gone, the API may not be left open beyond this host.
    new.check_exposure().map_err(|e| e.to_string())?;
    let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    let mut carry = Vec::with_capacity(new.links.len());
    for l in &mut new.links {
        let continued = old.link(&l.name).and_then(|(i, o)| {
            let mut as_old = l.clone();
            as_old.probe_port = o.probe_port;
            o.same_measurement(&as_old).then_some((i, o.probe_port))
        });
        match continued {
            Some((i, port)) => {
                l.probe_port = port;
                carry.push(Some(i));
            }
            None => {
                if old.link(&l.name).is_some() {
                    changed.push(l.name.clone());
                } else {
                    added.push(l.name.clone());
                }
                carry.push(None);
            }
        }
    }
    removed.extend(
        old.links
            .iter()
            .filter(|o| new.link(&o.name).is_none())
            .map(|o| o.name.clone()),
    );
    // New links take probe ports no link that goes on holds.
    let mut taken: Vec<u16> = new
        .links
        .iter()
        .zip(&carry)
        .filter(|(_, c)| c.is_some())
        .map(|(l, _)| l.probe_port)
        .collect();
    for (l, c) in new.links.iter_mut().zip(&carry) {
        if c.is_none() {
            l.probe_port = link::free_probe_port(new.probe_port_base, &taken).ok_or_else(|| {
                format!(
                    "{}: no probe port left from probe-port-base {}",
                    l.name, new.probe_port_base
                )
            })?;
            taken.push(l.probe_port);
        }
    }
    Ok(ReloadPlan {
        config: new,
        carry,
        added,
        removed,
        changed,
        need_restart: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(links: &str, extra: &str) -> Config {
        Config::from_toml(&format!("{extra}\n{links}"), None).unwrap()
    }

    fn link(name: &str, from: &str, interval: &str) -> String {
        format!("[[link]]\nname = \"{name}\"\nfrom = \"{from}\"\ninterval = \"{interval}\"\n")
    }

    #[test]
    fn links_that_measure_as_they_did_go_on_with_their_ports() {
        let old = config(
            &[
                link("a", "10.0.0.1", "1m"),
                link("b", "10.0.0.2", "1m"),
                link("c", "10.0.0.3", "1m"),
            ]
            .concat(),
            "",
        );
        // b goes, c stays (now second), a is changed, d is new.
        let new = config(
            &[
                link("a", "10.0.0.1", "2m"),
                link("c", "10.0.0.3", "1m"),
                link("d", "10.0.0.4", "1m"),
            ]
            .concat(),
            "",
        );
        let p = plan(&old, new).unwrap();
        assert_eq!(p.carry, [None, Some(2), None]);
        assert_eq!(p.added, ["d"]);
        assert_eq!(p.removed, ["b"]);
        assert_eq!(p.changed, ["a"]);
        assert_eq!(p.ended(), ["b", "a"]);
        assert!(p.need_restart.is_empty());
        let port = |c: &Config, n: &str| c.link(n).unwrap().1.probe_port;
        assert_eq!(port(&p.config, "c"), port(&old, "c"));
        // The new and changed links take free ports: none is c's, none twice.
        let mut ports: Vec<u16> = p.config.links.iter().map(|l| l.probe_port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 3);
        assert!(!ports.contains(&mgrp_tool::control::DEFAULT_SENDER_PROBE_PORT));
        // The same file again changes nothing.
        let again = plan(&p.config, p.config.clone()).unwrap();
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn what_needs_a_restart_stays_and_is_named_and_an_open_api_is_refused() {
        let old = config(&link("a", "10.0.0.1", "1m"), "listen = \"127.0.0.1:7700\"");
        let new = config(
            &link("a", "10.0.0.1", "1m"),
            "listen = \"127.0.0.1:7701\"\nhistory = 5\nmax-running = 2\n[serve]\nallow = [\"10.0.0.0/8\"]\nmax-measurements = 50\n",
        );
        let p = plan(&old, new).unwrap();
        assert_eq!(p.need_restart, ["listen", "history"]);
        assert_eq!(p.config.listen, old.listen);
        assert_eq!(p.config.history, old.history);
        assert_eq!(p.config.max_running, 2);
        assert_eq!(p.config.serve_allow.len(), 1);
        // How much it serves at once is reloaded.
        assert_eq!(p.config.serve_limits.measurements, 50);
        assert_eq!(p.config.serve_limits.connections, 100);
        assert_eq!(p.carry, [Some(0)]);
        // A token dropped on an API beyond loopback is refused whole.
        let dir = std::env::temp_dir().join(format!("overlay-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "0123456789abcdef0123").unwrap();
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let open = format!(
            "listen = \"192.0.2.1:7700\"\ntoken-file = \"{}\"",
            token.display()
        );
        let old = config(&link("a", "10.0.0.1", "1m"), &open);
        let new = config(&link("a", "10.0.0.1", "1m"), "listen = \"192.0.2.1:7700\"");
        let e = plan(&old, new);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.is_err(), "{e:?}");
    }
}
