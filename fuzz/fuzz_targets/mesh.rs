//! Any text as a mesh description: reading it must never panic; a refusal names a
//! line of the text; and what a description gives each member is consistent: no
//! member is its own peer, every link comes from one of its peers, no two links
//! share a name, its per-node files are TOML, and Prometheus' targets are JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mgrp_mesh::Mesh;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Mesh::parse(text) {
        Err(e) => assert!(
            e.line >= 1 && e.line <= text.lines().count().max(1) + 1,
            "{e}"
        ),
        Ok(mesh) => {
            for t in [mesh.overlay_targets(), mesh.mgrpd_targets()] {
                serde_json::to_string(&t).expect("targets are JSON");
            }
            for name in mesh.members.keys() {
                let plan = mesh.plan(name).expect("a member has a part");
                assert!(plan.peers.iter().all(|p| p.name != *name));
                for l in &plan.links {
                    assert!(plan.peers.iter().any(|p| p.name == l.from), "{l:?}");
                }
                let mut names: Vec<&str> = plan.links.iter().map(|l| l.name.as_str()).collect();
                names.sort_unstable();
                let n = names.len();
                names.dedup();
                assert_eq!(n, names.len());
                for text in [plan.mgrpd_toml(), plan.overlay_toml()] {
                    if let Err(e) = text.parse::<toml::Table>() {
                        panic!("{e}\n{text}");
                    }
                }
            }
        }
    }
});
