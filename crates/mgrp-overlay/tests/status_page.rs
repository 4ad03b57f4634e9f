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

#[test]
fn the_page_shows_every_link_in_a_headless_browser() {
    const NAME: &str = "the_page_shows_every_link_in_a_headless_browser";
    if mgrp_testbed::packages::find("chromium").is_none()
        && let Some(why) = mgrp_testbed::packages::unavailable("chromium")
    {
        mgrp_testbed::note_skip(NAME, &format!("no headless browser: {why}"));
        return;
    }
    let chromium = mgrp_testbed::packages::find("chromium").unwrap_or_else(|| {
        panic!(
            "{}",
            mgrp_testbed::packages::require(&["chromium"]).unwrap_err()
        )
    });
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
        .arg(format!("http://{}/", api.addr))
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
    // What the page shows, without the script's own text.
    let shown = dom.split("<script>").next().unwrap_or_default();
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
