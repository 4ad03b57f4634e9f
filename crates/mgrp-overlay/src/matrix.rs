//! `mgrp-overlay matrix`: one collector's view of the whole mesh. It reads every
//! member's links from its API (the description's `api`), takes each measured
//! path's newest available-bandwidth estimate, and gives every other pair its
//! inferred value (`mgrp_mesh::infer`), each marked with its basis and age.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use mgrp_mesh::Mesh;
use mgrp_mesh::infer::{Basis as InferBasis, Inference, Measured};
use mgrp_views::link::Links;
use mgrp_views::matrix::{Basis, Cell, LossCell, Matrix, SCHEMA, Unread};

use crate::measure::method::Gives;
use crate::measure::registry::Method;

/// `a` against `b` with each run of digits taken as a number: "n2" before "n10",
/// "n02" beside "n2" (then by text, so the order is total).
fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn runs(s: &str) -> impl Iterator<Item = (bool, &str)> {
        let mut rest = s;
        std::iter::from_fn(move || {
            let first = rest.chars().next()?;
            let digits = first.is_ascii_digit();
            let end = rest
                .find(|c: char| c.is_ascii_digit() != digits)
                .unwrap_or(rest.len());
            let (run, tail) = rest.split_at(end);
            rest = tail;
            Some((digits, run))
        })
    }
    // A run of digits is its number: the longer (without leading zeros) is larger,
    // runs of one length compare as text.
    let key = |s: &'_ str| -> Vec<(bool, usize, String)> {
        runs(s)
            .map(|(digits, r)| {
                if digits {
                    let n = r.trim_start_matches('0');
                    (true, n.len(), n.to_owned())
                } else {
                    (false, 0, r.to_owned())
                }
            })
            .collect()
    };
    key(a).cmp(&key(b)).then_with(|| a.cmp(b))
}

/// The matrix of `mesh` from the links each member's API gave (`read`, by member
/// name; an error for one that could not be read), at `now` (Unix seconds). An
/// estimate older than the description's budget `age` bounds an inferred pair only
/// where nothing fresher does.
pub fn matrix_of(mesh: &Mesh, read: &BTreeMap<String, Result<Links, String>>, now: f64) -> Matrix {
    // Members in their names' natural order (n2 before n10), as a reader counts them.
    let mut names: Vec<String> = mesh.members.keys().cloned().collect();
    names.sort_by(|a, b| natural_order(a, b));
    let index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut regions: Vec<Option<usize>> = Vec::with_capacity(names.len());
    let mut region_names: BTreeMap<&str, usize> = BTreeMap::new();
    for m in names.iter().map(|n| &mesh.members[n]) {
        regions.push(m.region.as_deref().map(|r| {
            let next = region_names.len();
            *region_names.entry(r).or_insert(next)
        }));
    }
    // Each path's newest available-bandwidth estimate, and the link that gave it.
    let mut newest: BTreeMap<(usize, usize), (Measured, String, String)> = BTreeMap::new();
    let mut losses: BTreeMap<(usize, usize), LossCell> = BTreeMap::new();
    let mut unread = Vec::new();
    for (member, links) in read {
        let Some(&into) = index.get(member.as_str()) else {
            continue;
        };
        let links = match links {
            Ok(l) => l,
            Err(e) => {
                unread.push(Unread {
                    member: member.clone(),
                    error: e.clone(),
                });
                continue;
            }
        };
        for l in &links.links {
            let Some(&from) = l.neighbour.as_deref().and_then(|n| index.get(n)) else {
                continue;
            };
            let gives = Method::named(&l.method).map(Method::gives);
            if gives == Some(Gives::LossEpisodes)
                && let Some(e) = &l.latest
                && let Some(loss) = &e.loss
            {
                // A member's answer is taken as far as it makes sense: shares are 0
                // to 1.
                let share = |x: f64| (0.0..=1.0).contains(&x);
                if !(share(loss.episode_frequency) && share(loss.loss_rate)) {
                    continue;
                }
                let age_s = (now - e.ended_at).max(0.0);
                let keep = losses
                    .get(&(from, into))
                    .is_none_or(|old| old.age_s > age_s);
                if keep {
                    losses.insert(
                        (from, into),
                        LossCell {
                            from: names[from].clone(),
                            to: names[into].clone(),
                            episode_frequency: loss.episode_frequency,
                            loss_rate: loss.loss_rate,
                            age_s,
                            link: l.name.clone(),
                        },
                    );
                }
                continue;
            }
            let Some(e) = l
                .latest
                .as_ref()
                .filter(|_| gives == Some(Gives::AvailableBandwidth))
            else {
                continue;
            };
            let bps = match (e.low_bps, e.high_bps) {
                (Some(lo), Some(hi)) => (lo + hi) / 2.0,
                (Some(lo), None) => lo,
                _ => continue,
            };
            if !(bps.is_finite() && bps > 0.0) {
                continue;
            }
            let m = Measured {
                from,
                into,
                bps,
                at: e.ended_at,
            };
            let keep = newest
                .get(&(from, into))
                .is_none_or(|(old, _, _)| old.at < m.at);
            if keep {
                newest.insert((from, into), (m, l.name.clone(), l.method.clone()));
            }
        }
    }
    let entries: Vec<&(Measured, String, String)> = newest.values().collect();
    let measured: Vec<Measured> = entries.iter().map(|(m, _, _)| *m).collect();
    let stale = mesh.budget.as_ref().map(|b| now - b.age.as_secs_f64());
    let inference = Inference::new(&regions, &measured, stale);
    let path = |i: usize| format!("{}>{}", names[measured[i].from], names[measured[i].into]);
    let mut cells = Vec::new();
    for (i, from) in names.iter().enumerate() {
        for (j, to) in names.iter().enumerate() {
            if i == j {
                continue;
            }
            let Some(v) = inference.value(i, j) else {
                continue;
            };
            let basis = match v.basis {
                InferBasis::Measured(k) => Basis::Measured {
                    link: entries[k].1.clone(),
                    method: entries[k].2.clone(),
                },
                InferBasis::Inferred {
                    uplink,
                    downlink,
                    core,
                } => Basis::Inferred {
                    uplink: path(uplink),
                    downlink: path(downlink),
                    core: core.map(path),
                },
            };
            cells.push(Cell {
                from: from.clone(),
                to: to.clone(),
                bps: v.bps,
                age_s: (now - v.at).max(0.0),
                basis,
            });
        }
    }
    let apis = mesh
        .members
        .values()
        .filter_map(|m| Some((m.name.clone(), m.api.as_ref()?.to_string())))
        .collect();
    Matrix {
        schema: SCHEMA,
        at: now,
        members: names,
        cells,
        unread,
        losses: losses.into_values().collect(),
        apis,
    }
}

/// How a collector reaches the members' APIs: a bearer token, and the authority
/// that signed the certificates of those served over TLS.
#[derive(Clone, Default, PartialEq)]
pub struct Access {
    /// Sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// The authority's certificate (PEM).
    pub ca: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("token", &self.token.as_ref().map(|_| "(set, not shown)"))
            .field("ca", &self.ca)
            .finish()
    }
}

impl Access {
    /// From a token file and an authority's file, either optional.
    pub fn load(token_file: Option<&Path>, ca: Option<&Path>) -> anyhow::Result<Self> {
        let token = token_file
            .map(|f| {
                mgrp_service::settings::read_token_file(f, None)
                    .map(|(_, t)| t)
                    .map_err(|e| anyhow::anyhow!("token-file: {e}"))
            })
            .transpose()?;
        Ok(Self {
            token,
            ca: ca.map(Path::to_path_buf),
        })
    }
}

/// Reads every member's links from its API (over TLS when its `api` is
/// `https://`) and gives the matrix. A member that cannot be read is listed as
/// unread with why; an API over TLS without an authority to check it is an error.
pub fn read_members(mesh: &Mesh, access: &Access) -> anyhow::Result<Matrix> {
    let mut read = BTreeMap::new();
    for m in mesh.members.values() {
        let Some(api) = mgrp_mesh::RouteApi::of(m) else {
            read.insert(
                m.name.clone(),
                Err("the description gives it no api".to_owned()),
            );
            continue;
        };
        let tls = if api.tls {
            let Some(ca) = &access.ca else {
                anyhow::bail!(
                    "member {}: its API is over TLS: give the authority that signed its certificate (ca-file)",
                    m.name
                );
            };
            let name = api
                .tls_name
                .clone()
                .unwrap_or_else(|| api.addr.ip().to_string());
            Some(
                mgrp_service::tls::ClientTls::load(ca, &name)
                    .map_err(|e| anyhow::anyhow!("ca-file: {e}"))?,
            )
        } else {
            None
        };
        let got = mgrp_route::control::http_get::<Links>(
            api.addr,
            "/v1/links",
            access.token.as_deref(),
            tls.as_ref(),
        );
        read.insert(m.name.clone(), got);
    }
    Ok(matrix_of(mesh, &read, mgrp_rt::unix_now()))
}

/// `mgrp-overlay matrix`: the description at `path`, read with `token_file`'s token
/// and trusting `ca`.
pub fn collect(
    path: &Path,
    token_file: Option<&Path>,
    ca: Option<&Path>,
) -> anyhow::Result<Matrix> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the mesh description {}", path.display()))?;
    let mesh = Mesh::parse(&text).with_context(|| format!("mesh {}", path.display()))?;
    let access = Access::load(token_file, ca).map_err(|e| anyhow::anyhow!("--{e}"))?;
    read_members(&mesh, &access)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_views::link::LinkView;
    use mgrp_views::sample;

    #[test]
    fn members_come_in_their_names_natural_order() {
        let mut names = vec!["n10", "n2", "n1", "edge", "n02", "n2b", "n100", "m9x"];
        names.sort_by(|a, b| natural_order(a, b));
        assert_eq!(
            names,
            ["edge", "m9x", "n1", "n02", "n2", "n2b", "n10", "n100"]
        );
        // The matrix lists them so.
        let mut t = String::new();
        for (i, n) in ["n10", "n2", "n1"].iter().enumerate() {
            t.push_str(&format!(
                "[[member]]\nname = \"{n}\"\naddress = \"10.9.0.{}\"\nregion = \"r{n}\"\n",
                i + 1
            ));
        }
        t.push_str("[[group]]\nname = \"g\"\nkind = \"full-mesh\"\nmembers = [\"n10\", \"n2\", \"n1\"]\nmethods = [\"pathchirp\"]\n");
        let mesh = Mesh::parse(&t).unwrap();
        let m = matrix_of(&mesh, &BTreeMap::new(), 0.0);
        assert_eq!(m.members, ["n1", "n2", "n10"]);
    }

    /// Members a, b, c (a and b in region r1, c in r2), b measuring a by pathChirp
    /// and c measuring b; `c` runs badabing from a too, which gives no bandwidth.
    fn mesh() -> Mesh {
        let mut t = String::new();
        for (i, (n, r)) in [("a", "r1"), ("b", "r1"), ("c", "r2")].iter().enumerate() {
            t.push_str(&format!(
                "[[member]]\nname = \"{n}\"\naddress = \"10.9.0.{}\"\nregion = \"{r}\"\n",
                i + 1
            ));
        }
        t.push_str("[[group]]\nname = \"g\"\nkind = \"full-mesh\"\nmembers = [\"a\", \"b\", \"c\"]\nmethods = [\"pathchirp\"]\n");
        Mesh::parse(&t).unwrap()
    }

    fn link(name: &str, neighbour: &str, method: &str, bps: f64, at: f64) -> LinkView {
        let mut e = sample::estimate();
        e.low_bps = Some(bps);
        e.high_bps = Some(bps);
        e.ended_at = at;
        e.method = method.into();
        LinkView {
            name: name.into(),
            neighbour: Some(neighbour.into()),
            method: method.into(),
            latest: Some(e),
            ..sample::link_view()
        }
    }

    fn links(node: &str, l: Vec<LinkView>) -> Links {
        Links {
            node: node.into(),
            links: l,
        }
    }

    #[test]
    fn every_pair_is_measured_or_inferred_with_its_basis_and_age() {
        let mesh = mesh();
        let mut read = BTreeMap::new();
        read.insert(
            "b".to_owned(),
            Ok(links(
                "b",
                vec![link("a-pathchirp", "a", "pathchirp", 8e6, 900.0)],
            )),
        );
        read.insert(
            "c".to_owned(),
            Ok(links(
                "c",
                vec![
                    link("b-pathchirp", "b", "pathchirp", 5e6, 950.0),
                    link("a-badabing", "a", "badabing", 1e9, 990.0),
                ],
            )),
        );
        read.insert("a".to_owned(), Err("connection refused".to_owned()));
        let m = matrix_of(&mesh, &read, 1000.0);
        assert_eq!(m.schema, 1);
        assert_eq!(m.members, ["a", "b", "c"]);
        assert_eq!(
            m.unread,
            [Unread {
                member: "a".into(),
                error: "connection refused".into()
            }]
        );
        let cell = |f: &str, t: &str| m.cells.iter().find(|c| c.from == f && c.to == t);
        let ab = cell("a", "b").unwrap();
        assert!(!ab.inferred());
        assert_eq!((ab.bps, ab.age_s), (8e6, 100.0));
        assert_eq!(
            ab.basis,
            Basis::Measured {
                link: "a-pathchirp".into(),
                method: "pathchirp".into()
            }
        );
        // a → c: not measured (badabing gives no bandwidth); a's uplink ≥ 8 (a>b),
        // c's downlink ≥ 5 (b>c), r1 → r2's core ≥ 5 (b>c): 5, as old as a>b.
        let ac = cell("a", "c").unwrap();
        assert!(ac.inferred());
        assert_eq!((ac.bps, ac.age_s), (5e6, 100.0));
        assert_eq!(
            ac.basis,
            Basis::Inferred {
                uplink: "a>b".into(),
                downlink: "b>c".into(),
                core: Some("b>c".into())
            }
        );
        // Nothing goes into a, and c sends nothing measured.
        assert!(cell("b", "a").is_none() && cell("c", "b").is_none());
        // The JSON says which is which.
        let json = serde_json::to_string(&m).unwrap();
        assert!(
            json.contains(
                r#""basis":{"kind":"inferred","uplink":"a>b","downlink":"b>c","core":"b>c"}"#
            ),
            "{json}"
        );
        assert!(
            json.contains(
                r#""basis":{"kind":"measured","link":"a-pathchirp","method":"pathchirp"}"#
            ),
            "{json}"
        );
    }

    /// A loss method's pair is in the losses with its shares; shares a member gives
    /// outside 0 to 1 are not taken.
    #[test]
    fn losses_are_taken_only_as_shares() {
        let loss = |f: f64| {
            let mut l = link("a-badabing", "a", "badabing", 1e6, 990.0);
            l.latest.as_mut().unwrap().loss = Some(mgrp_views::estimate::Loss {
                episode_frequency: f,
                episode_frequency_ci: 0.0,
                episode_duration_s: None,
                episode_duration_ci_s: None,
                loss_rate: f / 2.0,
                experiments: 100,
            });
            l
        };
        let of = |f: f64| {
            let read = BTreeMap::from([("b".to_owned(), Ok(links("b", vec![loss(f)])))]);
            matrix_of(&mesh(), &read, 1000.0).losses
        };
        let taken = of(0.02);
        assert_eq!(taken.len(), 1);
        assert_eq!(
            (
                taken[0].episode_frequency,
                taken[0].loss_rate,
                taken[0].age_s
            ),
            (0.02, 0.01, 10.0)
        );
        assert_eq!(of(5.0), []);
        assert_eq!(of(-0.1), []);
    }

    /// The collector reads each member's API over HTTP: members serving their links
    /// on loopback, one member down.
    #[test]
    fn the_collector_reads_every_members_api() {
        use std::io::{Read, Write};
        let serve = |body: String| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            std::thread::spawn(move || {
                if let Ok((mut s, _)) = l.accept() {
                    let mut req = [0u8; 1024];
                    let _ = s.read(&mut req);
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
            port
        };
        let now = mgrp_rt::unix_now();
        let b = serve(
            serde_json::to_string(&links(
                "b",
                vec![link("a-pathchirp", "a", "pathchirp", 8e6, now - 30.0)],
            ))
            .unwrap(),
        );
        let c = serve(
            serde_json::to_string(&links(
                "c",
                vec![link("b-pathchirp", "b", "pathchirp", 5e6, now - 60.0)],
            ))
            .unwrap(),
        );
        // a's API: a port nothing listens on.
        let down = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut t = String::new();
        for (i, (n, port)) in [("a", down), ("b", b), ("c", c)].iter().enumerate() {
            t.push_str(&format!(
                "[[member]]\nname = \"{n}\"\naddress = \"10.9.0.{}\"\napi = \"http://127.0.0.1:{port}\"\n",
                i + 1
            ));
        }
        t.push_str("[[group]]\nname = \"g\"\nkind = \"full-mesh\"\nmembers = [\"a\", \"b\", \"c\"]\nmethods = [\"pathchirp\"]\n");
        let dir = std::env::temp_dir().join(format!("overlay-matrix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("mesh.toml");
        std::fs::write(&p, t).unwrap();
        let m = collect(&p, None, None);
        let _ = std::fs::remove_dir_all(&dir);
        let m = m.unwrap();
        assert_eq!(m.unread.len(), 1, "{:?}", m.unread);
        assert_eq!(m.unread[0].member, "a");
        let ac = m
            .cells
            .iter()
            .find(|c| c.from == "a" && c.to == "c")
            .unwrap();
        assert!(ac.inferred());
        assert_eq!(ac.bps, 5e6);
        // As old as its older input, b>c.
        assert!((55.0..70.0).contains(&ac.age_s), "{ac:?}");
        assert_eq!(m.cells.iter().filter(|c| !c.inferred()).count(), 2);
    }
}
