//! The status page in a real headless browser (Debian's `chromium`, which
//! `scripts/test` installs): it loads, shows a panel for every configured link, and
//! its script fills them from the API (state, runs) and draws the plot. Without the
//! package this test fails and says how to install it, unless the test command found
//! it cannot be installed here (Ubuntu ships chromium only as a snap): then it says it
//! skipped and why.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Api, free_port, node_a};
use mgrp_overlay::config::Config;

/// B with two links: one from A, which answers, and one from a neighbour that is
/// down, so the page shows an error too.
fn config(a_port: u16) -> Config {
    let toml = format!(
        "name = \"b\"\nprobe-port-base = {}\n[serve]\ntransports = []\n\
         [[link]]\nname = \"from-a\"\nfrom = \"127.0.0.1\"\nport = {a_port}\ntransport = \"udp\"\n\
         interval = \"2s\"\ntime-limit = \"5s\"\n\
         [[link]]\nname = \"from-c\"\nfrom = \"127.0.0.1\"\nport = {}\ntransport = \"udp\"\n\
         interval = \"2s\"\ntime-limit = \"5s\"\nbackoff = \"1s\"\nmax-backoff = \"1s\"\n",
        free_port(),
        free_port()
    );
    Config::from_toml(&toml, None).unwrap()
}

/// Debian's chromium, or `None` (the test skipped, and why) where the test command
/// found it cannot be installed here.
fn chromium(test: &str) -> Option<std::path::PathBuf> {
    if mgrp_testbed::packages::find("chromium").is_none()
        && let Some(why) = mgrp_testbed::packages::unavailable("chromium")
    {
        mgrp_testbed::note_skip(test, &format!("no headless browser: {why}"));
        return None;
    }
    Some(mgrp_testbed::packages::find("chromium").unwrap_or_else(|| {
        panic!(
            "{}",
            mgrp_testbed::packages::require(&["chromium"]).unwrap_err()
        )
    }))
}

/// The page at `url` as headless `chromium` leaves it once its script ran, without
/// the script's own text.
fn rendered(chromium: &std::path::Path, url: &str) -> String {
    let profile = std::env::temp_dir().join(format!("mgrp-overlay-chromium-{}", free_port()));
    let child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=8000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !dom.is_empty(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dom.split("<script>").next().unwrap_or_default().to_owned()
}

#[test]
fn the_page_shows_every_link_in_a_headless_browser() {
    const NAME: &str = "the_page_shows_every_link_in_a_headless_browser";
    let Some(chromium) = chromium(NAME) else {
        return;
    };
    let (a, a_port) = node_a();
    let api = Api::start(config(a_port));
    let shared = api.node.as_ref().unwrap().shared();
    // Wait for a run of each link, so the page has something to show.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30)
        && !shared.links().iter().all(|l| l.runs.total() > 0)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let shown = rendered(&chromium, &format!("http://{}/", api.addr));
    for link in ["from-a", "from-c"] {
        assert!(shown.contains(&format!("id=\"link-{link}\"")), "{shown}");
    }
    // The script ran and reached the API: the time of its last refresh, each link's
    // state and runs, and the down neighbour's error are filled in.
    assert!(shown.contains("<p id=\"updated\">updated "), "{shown}");
    assert_eq!(shown.matches("<p class=\"state\">").count(), 2, "{shown}");
    assert!(!shown.contains("<p class=\"state\"></p>"), "{shown}");
    assert!(shown.contains(" peer down</span>"), "{shown}");
    assert!(
        shown.contains("<p class=\"error\">last run: peer down: cannot reach the sender"),
        "{shown}"
    );
    // The plots have their axes, units and legend; the outcomes are explained.
    assert!(shown.contains(">available, "), "{shown}");
    assert!(shown.contains(">range (less riders)</text>"), "{shown}");
    assert!(shown.contains("<dt>lower_bound</dt>"), "{shown}");
    drop(api);
    a.stop();
}

/// A mesh of four members on loopback, each measuring the one before it (a ring:
/// d → a, a → b, b → c, c → d, by pathChirp over UDP), a and b in one region, c
/// and d in another; a fifth node collects the matrix from their APIs. Its
/// `/matrix` page, in the browser, has every member as a row and a column, the four
/// measured pairs as such with their links, inferred ones told apart, and the basis
/// and age on hover; `/v1/matrix` and `/metrics` mark them too.
#[test]
fn the_matrix_page_shows_every_member_of_a_four_node_mesh() {
    const NAME: &str = "the_matrix_page_shows_every_member_of_a_four_node_mesh";
    let Some(chromium) = chromium(NAME) else {
        return;
    };
    let names = ["a", "b", "c", "d"];
    let ports: Vec<u16> = names.iter().map(|_| free_port()).collect();
    let members: Vec<Api> = (0..4)
        .map(|i| {
            let before = (i + 3) % 4;
            let toml = format!(
                "name = \"{me}\"\nprobe-port-base = {}\n\
                 [serve]\ntransports = [\"udp\"]\nudp-port = {}\nmax-mb-per-hour = 100000\n\
                 [[link]]\nname = \"{from}-pathchirp\"\nfrom = \"127.0.0.1\"\nneighbour = \"{from}\"\n\
                 port = {}\ntransport = \"udp\"\nmethod = \"pathchirp\"\ninterval = \"2s\"\ntime-limit = \"10s\"\n",
                free_port(),
                ports[i],
                ports[before],
                me = names[i],
                from = names[before],
            );
            Api::start(Config::from_toml(&toml, None).unwrap())
        })
        .collect();
    let dir = common::Dir::new("matrix-page");
    let mut mesh = String::new();
    for (i, m) in members.iter().enumerate() {
        mesh.push_str(&format!(
            "[[member]]\nname = \"{}\"\naddress = \"192.0.2.{}\"\napi = \"http://{}\"\nregion = \"{}\"\n",
            names[i],
            i + 1,
            m.addr,
            if i < 2 { "r1" } else { "r2" }
        ));
    }
    mesh.push_str(
        "[[group]]\nname = \"ring\"\nkind = \"full-mesh\"\nmembers = [\"a\", \"b\", \"c\", \"d\"]\nmethods = [\"pathchirp\"]\n",
    );
    let mesh_path = dir.0.join("mesh.toml");
    std::fs::write(&mesh_path, mesh).unwrap();
    let collector = Api::start(
        Config::from_toml(
            &format!(
                "name = \"collector\"\n[serve]\ntransports = []\n[matrix]\nmesh = \"{}\"\ninterval = \"1s\"\n",
                mesh_path.display()
            ),
            None,
        )
        .unwrap(),
    );
    let shared = collector.node.as_ref().unwrap().shared();
    let measured = || {
        shared
            .matrix()
            .and_then(Result::ok)
            .map_or(0, |m| m.cells.iter().filter(|c| !c.inferred()).count())
    };
    assert!(
        common::eventually(Duration::from_secs(60), || measured() == 4),
        "the collector did not see the four measured pairs: {:?}\nthe members' links: {:#?}",
        shared.matrix(),
        members
            .iter()
            .flat_map(|m| m.node.as_ref().unwrap().shared().links())
            .map(|l| (
                l.name,
                l.state,
                l.runs,
                l.last_error,
                l.latest.map(|e| e.outcome)
            ))
            .collect::<Vec<_>>()
    );
    let shown = rendered(&chromium, &format!("http://{}/matrix", collector.addr));
    for n in names {
        assert!(
            shown.contains(&format!("<th class=\"from\" scope=\"row\">{n}</th>"))
                && shown.contains(&format!("<th class=\"to\" scope=\"col\">{n}</th>")),
            "member {n} is not a row and a column: {shown}"
        );
    }
    assert_eq!(shown.matches(" class=\"self\"").count(), 4, "{shown}");
    assert_eq!(
        shown.matches("data-basis=\"measured\"").count(),
        4,
        "{shown}"
    );
    assert!(shown.contains("data-basis=\"inferred\""), "{shown}");
    // Hover: what a value rests on and its age; click: the receiver's link.
    assert!(
        shown.contains("measured by a-pathchirp (pathchirp), "),
        "{shown}"
    );
    assert!(
        shown.contains("'s uplink (") && shown.contains(" old\""),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "href=\"http://{}/#link-a-pathchirp\"",
            members[1].addr
        )),
        "{shown}"
    );
    assert!(shown.contains("<p id=\"updated\">updated "), "{shown}");
    // The API and the metrics say which pair is which.
    let (status, m) = common::json(collector.addr, "GET", "/v1/matrix");
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["schema"], 1);
    assert_eq!(m["members"], serde_json::json!(names));
    let (_, metrics) = common::request(collector.addr, "GET", "/metrics", "");
    assert!(
        metrics.contains(
            "mgrp_overlay_matrix_bandwidth_bytes_per_second{node=\"collector\",from=\"a\",to=\"b\",basis=\"measured\"}"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("basis=\"inferred\""), "{metrics}");
    // The status page points at the matrix; a member that collects none says so.
    let (_, page) = common::request(collector.addr, "GET", "/", "");
    assert!(
        page.contains("<a href=\"matrix\">the whole mesh</a>"),
        "{page}"
    );
    let (status, body) = common::request(members[0].addr, "GET", "/v1/matrix", "");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("[matrix]"), "{body}");
    drop(collector);
    drop(members);
}
