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
    let budget = mesh.plan_budget(&crate::config::budget_costs());
    if let Some(b) = &budget {
        if !b.shortfalls.is_empty() {
            let said: Vec<String> = b.shortfalls.iter().map(|s| format!("  {s}")).collect();
            anyhow::bail!(
                "mesh {}: the budget cannot meet its own age of {}s (it affords {}s):\n{}",
                path.display(),
                mesh.budget.as_ref().map_or(0, |g| g.age.as_secs()),
                b.affords.as_secs(),
                said.join("\n")
            );
        }
        let _ = write!(out, "{}", budget_summary(&mesh, b));
    }
    for name in mesh.members.keys() {
        let plan = mesh.plan(name)?;
        let plan = match &budget {
            Some(b) => plan.with_budget(b),
            None => plan,
        };
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

/// What the budget's plan spends and affords, as `--check-mesh` prints it.
fn budget_summary(mesh: &Mesh, b: &mgrp_mesh::budget::BudgetPlan) -> String {
    use mgrp_mesh::budget::Role;
    let n = mesh.members.len();
    let pairs = (n * n.saturating_sub(1)).max(1) as f64;
    let probes: f64 = b.links.values().map(|l| l.bytes_per_hour).sum();
    let heartbeats: f64 = b
        .nodes
        .values()
        .map(|n| n.heartbeat_bytes_per_hour)
        .sum::<f64>()
        / 2.0;
    let polls: f64 = b.nodes.values().map(|n| n.poll_bytes_per_hour).sum::<f64>() / 2.0;
    let most = b
        .nodes
        .iter()
        .max_by(|x, y| x.1.total().total_cmp(&y.1.total()))
        .map(|(name, nb)| format!("{name} {:.1} MB", nb.total() / 1e6))
        .unwrap_or_default();
    let primaries = b.links.values().filter(|l| l.role == Role::Primary).count();
    let goal = mesh.budget.as_ref().map_or(0, |g| g.age.as_secs());
    format!(
        "# budget: every path's newest estimate younger than {}s (goal {goal}s); {primaries} primary links, {} secondary; an hour: probes {:.1} MB, heartbeats {:.1} MB, polls {:.1} MB; {:.3} MB per link-hour over all {} ordered pairs; the most a node spends: {most} an hour\n",
        b.affords.as_secs(),
        b.links.len() - primaries,
        probes / 1e6,
        heartbeats / 1e6,
        polls / 1e6,
        (probes + heartbeats + polls) / 1e6 / pairs,
        pairs as u64,
    )
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

    /// A budget's plan is what each member's overlay runs, and `--check-mesh`
    /// prints it, or refuses a budget that cannot meet its own age.
    #[test]
    fn check_mesh_prints_the_budgets_plan_and_refuses_one_short_of_its_age() {
        let text = std::fs::read_to_string(example())
            .unwrap()
            .replace("interval = \"10m\"\n", "")
            + "\n[budget]\nnode-mb-per-hour = 100\nage = \"10m\"\n";
        let dir = std::env::temp_dir().join(format!("overlay-check-budget-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("mesh.toml");
        std::fs::write(&p, &text).unwrap();
        let report = check(&p);
        let config = Config::from_mesh_for_check(&format!(
            "mesh = {}\nnode = \"lon1\"\n",
            quoted(&p.to_string_lossy())
        ));
        std::fs::write(
            &p,
            text.replace("node-mb-per-hour = 100", "node-mb-per-hour = 2"),
        )
        .unwrap();
        let short = check(&p).map_err(|e| format!("{e:#}"));
        let _ = std::fs::remove_dir_all(&dir);
        let report = report.unwrap();
        assert!(
            report.contains("# budget: every path's newest estimate younger than"),
            "{report}"
        );
        let mesh = Mesh::parse(&text).unwrap();
        let plan = mesh.plan_budget(&crate::config::budget_costs()).unwrap();
        let config = config.unwrap();
        // lon1's pathChirp link from nyc1 runs as planned, and is printed so.
        let planned = &plan.links[&(
            "lon1".to_owned(),
            "nyc1".to_owned(),
            "pathchirp".to_owned(),
            mgrp_mesh::Transport::Mgrp,
        )];
        assert!(planned.age <= std::time::Duration::from_secs(600));
        let (_, link) = config.link("nyc1-pathchirp").unwrap();
        assert_eq!(
            link.timing.interval.as_millis(),
            planned.interval.as_millis()
        );
        assert_eq!(link.time_limit, planned.time_limit);
        assert!(
            report.contains(&format!(
                "name = \"nyc1-pathchirp\"\nfrom = \"{}\"\nneighbour = \"nyc1\"\nmethod = \"pathchirp\"\ntransport = \"mgrp\"\ninterval = \"{}ms\"",
                mesh.members["nyc1"].address,
                planned.interval.as_millis()
            )),
            "{report}"
        );
        assert_eq!(config.max_running, plan.nodes["lon1"].max_running);
        // Its sender serves what the plan needs at once, and the report says so.
        let lon1 = &plan.nodes["lon1"];
        assert_eq!(
            (
                config.serve_limits.measurements,
                config.serve_limits.measurements_per_requester
            ),
            (
                lon1.serve_measurements,
                lon1.serve_measurements_per_requester
            )
        );
        assert!(
            report.contains(&format!(
                "max-measurements = {}\nmax-measurements-per-requester = {}\n",
                lon1.serve_measurements, lon1.serve_measurements_per_requester
            )),
            "{report}"
        );
        assert!(config.budget_shortfalls.is_empty());
        let short = short.unwrap_err();
        assert!(
            short.contains("the budget cannot meet its own age of 600s"),
            "{short}"
        );
        assert!(short.contains("over node-mb-per-hour"), "{short}");
    }
}
