//! Two overlay nodes on loopback over plain UDP (no root, no mgrpd): B measures the
//! link from A. Every run is recorded and broadcast, "measure now" starts one at
//! once, a neighbour that stops serving is seen as down and backed off from, and its
//! return is picked up. (Loopback is far faster than pathload's highest rate, so the
//! runs end "above the maximum rate" rather than with a range; the namespace tests
//! check ranges.)

mod common;

use std::time::{Duration, Instant};

use common::{eventually, free_port, node_a, node_a_on};
use mgrp_overlay::config::Config;
use mgrp_overlay::node::Node;
use mgrp_overlay::state::shared::{Event, NowError};
use mgrp_views::estimate::RunOutcome;

fn node_b(a_port: u16) -> Node {
    let probe = free_port();
    let toml = format!(
        "name = \"b\"\nprobe-port-base = {probe}\n[serve]\ntransports = []\n\
         [[link]]\nname = \"from-a\"\nfrom = \"127.0.0.1\"\nport = {a_port}\ntransport = \"udp\"\n\
         interval = \"30s\"\ntime-limit = \"5s\"\nbackoff = \"1s\"\nmax-backoff = \"2s\"\n"
    );
    Node::start(Config::from_toml(&toml, None).unwrap()).unwrap()
}

#[test]
fn runs_are_recorded_broadcast_and_survive_a_neighbour_going_away() {
    let (a, a_port) = node_a();
    let b = node_b(a_port);
    let shared = b.shared();
    let mut stream = shared.subscribe();

    // The first run comes within the start-up spread; it is broadcast and recorded.
    assert!(eventually(Duration::from_secs(20), || shared
        .history("from-a", 10)
        .is_some_and(|h| !h.is_empty())));
    // The run's record, then the neighbour's prediction after it (the neighbour's
    // kernel may have published one before: on loopback every TCP flow of the host
    // is "to the neighbour").
    let mut events = std::iter::from_fn(|| stream.try_recv().ok());
    let e = events
        .find_map(|ev| match ev {
            Event::Estimate(e) => Some(e),
            Event::Prediction(_) | Event::Passive(_) | Event::Route(_) => None,
        })
        .expect("the run was broadcast");
    // Passive events come at every poll of the neighbour's kernel, between others.
    match events
        .find(|ev| !matches!(ev, Event::Passive(_)))
        .expect("the prediction followed")
    {
        Event::Prediction(b) => assert_eq!(b.links, ["from-a"]),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.link, "from-a");
    assert_eq!(e.transport, "udp");
    assert!(e.probe_bytes > 0, "{e:?}");
    assert_eq!(e.rider_bytes, 0);
    assert_ne!(e.outcome, RunOutcome::PeerDown, "{e:?}");
    let view = shared.link("from-a").unwrap();
    assert_eq!(view.runs.total(), 1, "{view:?}");
    assert_eq!(view.runs.get(e.outcome), 1, "{view:?}");
    assert_eq!(view.probe_bytes, e.probe_bytes);
    assert!(view.from.ends_with(&format!(":{a_port}")));

    // Measure now: another run at once instead of in 30 s.
    let before = shared.history("from-a", 100).unwrap().len();
    assert!(eventually(Duration::from_secs(5), || shared
        .measure_now("from-a")
        .is_ok()));
    assert!(eventually(Duration::from_secs(15), || shared
        .history("from-a", 100)
        .unwrap()
        .len()
        > before));
    assert_eq!(shared.measure_now("nope"), Err(NowError::NoSuchLink));

    // A counted who measured it: one requester (B's address), however many runs.
    let served = a.shared().served();
    assert_eq!(served["udp"].requesters, 1, "{served:?}");
    assert!(served["udp"].measurements >= 1, "{served:?}");

    // A goes away: the next run finds it down and the link backs off.
    a.stop();
    shared.measure_now("from-a").unwrap();
    assert!(eventually(Duration::from_secs(15), || {
        let v = shared.link("from-a").unwrap();
        v.runs.get(RunOutcome::PeerDown) >= 1
            && v.peer_down
            && v.state == mgrp_views::link::LinkState::BackingOff
    }));
    let v = shared.link("from-a").unwrap();
    assert!(
        v.last_error
            .as_deref()
            .is_some_and(|e| e.contains("cannot reach the sender")),
        "{v:?}"
    );

    // A is back: the back-off (1 s, then 2 s) ends and runs succeed again.
    // Its old port: B still measures from there.
    let a = node_a_on(a_port);
    let down = shared
        .link("from-a")
        .unwrap()
        .runs
        .get(RunOutcome::PeerDown);
    assert!(eventually(Duration::from_secs(20), || {
        let v = shared.link("from-a").unwrap();
        v.runs.total() - v.runs.get(RunOutcome::PeerDown) >= 3 && v.failures == 0
    }));
    assert!(
        shared
            .link("from-a")
            .unwrap()
            .runs
            .get(RunOutcome::PeerDown)
            >= down
    );
    let stopping = Instant::now();
    b.stop();
    a.stop();
    assert!(stopping.elapsed() < Duration::from_secs(10));
}

/// With a state-dir, a restarted node has its links' history, counts and latest
/// answer back, and numbers its runs on from where it stopped.
#[test]
fn history_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("overlay-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (a, a_port) = node_a();
    let toml = format!(
        "name = \"b\"\nprobe-port-base = {}\nstate-dir = \"{}\"\n[serve]\ntransports = []\n\
         [[link]]\nname = \"from-a\"\nfrom = \"127.0.0.1\"\nport = {a_port}\ntransport = \"udp\"\n\
         interval = \"1s\"\ntime-limit = \"5s\"\n",
        free_port(),
        dir.display()
    );
    let b = Node::start(Config::from_toml(&toml, None).unwrap()).unwrap();
    let shared = b.shared();
    assert!(eventually(Duration::from_secs(30), || shared
        .history("from-a", 10)
        .is_some_and(|h| h.len() >= 2)));
    b.stop();
    let before = shared.history("from-a", 1000).unwrap();
    let view = shared.link("from-a").unwrap();
    assert!(dir.join("from-a.json").exists());

    let b = Node::start(Config::from_toml(&toml, None).unwrap()).unwrap();
    let again = b.shared();
    let restored = again.history("from-a", 1000).unwrap();
    assert_eq!(restored, before, "the history came back as it was");
    let v = again.link("from-a").unwrap();
    assert_eq!((v.runs, v.probe_bytes), (view.runs, view.probe_bytes));
    assert_eq!(v.latest, view.latest);
    assert!(eventually(Duration::from_secs(30), || again
        .history("from-a", 1000)
        .is_some_and(|h| h.len() > restored.len())));
    let newest = again.history("from-a", 1).unwrap()[0].seq;
    assert!(newest > before.last().unwrap().seq, "runs are numbered on");
    b.stop();
    a.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A link kept under the name it had without one (`FROM-TRANSPORT`), named later (as
/// a mesh description names links by member), takes that history with it: the runs
/// come back under the new name, and the old file is gone.
#[test]
fn a_link_named_later_keeps_the_history_of_its_unnamed_self() {
    let dir = std::env::temp_dir().join(format!("overlay-rename-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (a, a_port) = node_a();
    let toml = |name: &str| {
        format!(
            "name = \"b\"\nprobe-port-base = {}\nstate-dir = \"{}\"\n[serve]\ntransports = []\n\
             [[link]]\n{name}from = \"127.0.0.1\"\nport = {a_port}\ntransport = \"udp\"\n\
             interval = \"1s\"\ntime-limit = \"5s\"\n",
            free_port(),
            dir.display()
        )
    };
    let b = Node::start(Config::from_toml(&toml(""), None).unwrap()).unwrap();
    let shared = b.shared();
    let old = "127.0.0.1-udp";
    assert!(eventually(Duration::from_secs(30), || shared
        .history(old, 10)
        .is_some_and(|h| !h.is_empty())));
    b.stop();
    let before = shared.history(old, 1000).unwrap();
    assert!(dir.join(format!("{old}.json")).exists());

    let named = "a-pathload-fast";
    let b = Node::start(
        Config::from_toml(
            &toml(&format!("name = \"{named}\"\nneighbour = \"a\"\n")),
            None,
        )
        .unwrap(),
    )
    .unwrap();
    let restored = b.shared().history(named, 1000).unwrap();
    b.stop();
    a.stop();
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        restored.iter().map(|e| e.seq).collect::<Vec<_>>(),
        before.iter().map(|e| e.seq).collect::<Vec<_>>()
    );
    assert!(restored.iter().all(|e| e.link == named), "{restored:?}");
    assert!(
        files.iter().any(|f| f == &format!("{named}.json"))
            && !files.iter().any(|f| f == &format!("{old}.json")),
        "{files:?}"
    );
}
