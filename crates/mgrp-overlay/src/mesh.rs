//! What the command does with a mesh description besides running a node's part of
//! it: `--check-mesh` (every node's part, derived as each node would, or the first
//! inconsistency) and `prometheus-targets` (`file_sd` files for both jobs).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use mgrp_mesh::{Mesh, TargetGroup};

use crate::config::Config;

/// The description at `path`, read and checked, with the file named in its error.
fn read(path: &Path) -> anyhow::Result<Mesh> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the mesh description {}", path.display()))?;
    Mesh::parse(&text).with_context(|| format!("mesh {}", path.display()))
}

/// A string as a TOML value.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// Every member's part of the description at `path`, as `--check-mesh` prints it:
/// what its mgrpd and its overlay derive (in the form of the per-node files), each
/// derived as the node itself would, so a method this overlay does not have is
/// refused here too (route control's TLS aside: its authority is each node's own
/// `[routing] ca-file`). No secret is printed: the description holds none.
pub fn check(path: &Path) -> anyhow::Result<String> {
    let mesh = read(path)?;
    let mut out = String::new();
    let links: usize = mesh.groups.iter().map(|g| g.links().count()).sum();
    let _ = writeln!(
        out,
        "# mesh {}: {} members, {} groups, {links} links",
        path.display(),
        mesh.members.len(),
        mesh.groups.len()
    );
    for name in mesh.members.keys() {
        let plan = mesh.plan(name)?;
        let config = Config::from_mesh_for_check(&format!(
            "mesh = {}\nnode = {}\n",
            quoted(&path.to_string_lossy()),
            quoted(name)
        ))
        .with_context(|| format!("member {name}"))?;
        let _ = writeln!(
            out,
            "\n## {name} ({}): {} peers, {} links into it; probe ports {}",
            plan.node.address,
            plan.peers.len(),
            config.links.len(),
            config
                .links
                .iter()
                .map(|l| l.probe_port.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = write!(out, "\n{}\n{}", plan.mgrpd_toml(), plan.overlay_toml());
    }
    Ok(out)
}

/// The file names `prometheus-targets` writes, per job.
pub const TARGET_FILES: [&str; 2] = ["mgrp-overlay.json", "mgrpd.json"];

/// Writes the `file_sd` files of both jobs into `dir` (each replaced whole, so
/// Prometheus never reads half of one) and says what it wrote.
pub fn write_targets(path: &Path, dir: &Path) -> anyhow::Result<String> {
    let mesh = read(path)?;
    let mut said = String::new();
    for (file, groups) in TARGET_FILES
        .iter()
        .zip([mesh.overlay_targets(), mesh.mgrpd_targets()])
    {
        let to = dir.join(file);
        write_whole(&to, &groups)?;
        let _ = writeln!(said, "{}: {} targets", to.display(), groups.len());
    }
    Ok(said)
}

fn write_whole(to: &Path, groups: &[TargetGroup]) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(groups)? + "\n";
    let tmp = to.with_extension("json.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, to))
        .with_context(|| format!("cannot write {}", to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/mesh/example.toml")
    }

    /// The targets shipped beside prometheus.yml are what the command writes for the
    /// example description.
    #[test]
    fn the_shipped_targets_are_the_example_descriptions() {
        let dir = std::env::temp_dir().join(format!("overlay-targets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let said = write_targets(&example(), &dir);
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/targets");
        let files: Vec<(String, String)> = TARGET_FILES
            .iter()
            .map(|f| {
                (
                    std::fs::read_to_string(dir.join(f)).unwrap_or_default(),
                    std::fs::read_to_string(shipped.join(f)).unwrap_or_default(),
                )
            })
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        let said = said.unwrap();
        assert!(said.contains("mgrp-overlay.json: 4 targets"), "{said}");
        assert!(said.contains("mgrpd.json: 3 targets"), "{said}");
        for (written, shipped) in files {
            assert_eq!(written, shipped);
        }
    }

    #[test]
    fn check_mesh_prints_each_members_part_or_refuses_the_description() {
        let report = check(&example()).unwrap();
        for m in ["nyc1", "lon1", "fra1", "edge7"] {
            assert!(report.contains(&format!("\n## {m} (")), "{report}");
            assert!(report.contains(&format!("node = \"{m}\"")), "{report}");
        }
        assert!(report.contains("4 members, 3 groups, 20 links"), "{report}");
        // The routing members' route control, with the others' networks.
        assert!(
            report.contains(
                "[[routing.destination]]\nprefix = \"172.16.30.0/24\"\nmember = \"fra1\""
            ),
            "{report}"
        );
        let text = std::fs::read_to_string(example()).unwrap();
        let dir = std::env::temp_dir().join(format!("overlay-check-mesh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let refused = |text: String| {
            let p = dir.join("mesh.toml");
            std::fs::write(&p, text).unwrap();
            format!("{:#}", check(&p).unwrap_err())
        };
        let unknown = refused(text.replace("hub = \"fra1\"", "hub = \"fra2\""));
        let method = refused(text.replace("\"badabing\"", "\"ping\""));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            unknown.contains("line 59, group.hub: \"fra2\" is no member of the mesh"),
            "{unknown}"
        );
        assert!(
            method.contains("member edge7: ") && method.contains("method \"ping\""),
            "{method}"
        );
    }
}
