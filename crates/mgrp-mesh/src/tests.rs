use std::collections::BTreeMap;

use mgrp_core::pair::PrivateKey;
use proptest::prelude::*;

use super::*;

fn public(seed: u8) -> String {
    PrivateKey::from_bytes([seed; 32]).public().to_string()
}

/// Four members: a full mesh of three, and a star from `a` to the fourth.
fn example() -> String {
    let mut t = String::new();
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        t.push_str(&format!(
            "[[member]]\nname = \"{name}\"\naddress = \"10.0.0.{}\"\napi = \"https://10.0.0.{}:7700\"\npublic-key = \"{}\"\n\n",
            i + 1,
            i + 1,
            public(i as u8 + 1)
        ));
    }
    t.push_str(
        "[[group]]\nname = \"core\"\nkind = \"full-mesh\"\nmembers = [\"a\", \"b\", \"c\"]\n\
         methods = [\"pathload-fast\", \"pathchirp\"]\ntransports = [\"mgrp\", \"udp\"]\ninterval = \"10m\"\n\n\
         [[group]]\nname = \"edge\"\nkind = \"star\"\nhub = \"a\"\nmembers = [\"d\"]\nmethods = [\"badabing\"]\n",
    );
    t
}

#[test]
fn each_node_takes_its_part_of_one_description() {
    let mesh = Mesh::parse(&example()).unwrap();
    let a = mesh.plan("a").unwrap();
    let names = |v: &[PeerPlan]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a.peers), ["b", "c", "d"]);
    assert_eq!(a.node.address, "10.0.0.1".parse::<IpAddr>().unwrap());
    let links: Vec<&str> = a.links.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        links,
        [
            "b-pathchirp",
            "b-pathchirp-udp",
            "b-pathload-fast",
            "b-pathload-fast-udp",
            "c-pathchirp",
            "c-pathchirp-udp",
            "c-pathload-fast",
            "c-pathload-fast-udp",
            "d-badabing",
        ]
    );
    let d_link = a.links.last().unwrap();
    assert_eq!(
        (
            d_link.from.as_str(),
            d_link.transport,
            d_link.interval.as_deref()
        ),
        ("d", Transport::Mgrp, None)
    );
    assert_eq!(a.links[0].interval.as_deref(), Some("10m"));
    assert_eq!(a.links[0].address, "10.0.0.2".parse::<IpAddr>().unwrap());
    // The leaf sees the hub alone, with its key and API.
    let d = mesh.plan("d").unwrap();
    assert_eq!(names(&d.peers), ["a"]);
    assert_eq!(d.peers[0].public_key.unwrap().to_string(), public(1));
    assert_eq!(
        d.peers[0].api.as_ref().map(ToString::to_string).as_deref(),
        Some("https://10.0.0.1:7700")
    );
    assert_eq!(d.links.len(), 1);
    assert_eq!(
        mesh.plan("nobody").unwrap_err().to_string(),
        "no member is named \"nobody\" (its members: a, b, c, d)"
    );
}

#[test]
fn pairs_by_kind() {
    let names = |n: usize| (0..n).map(|i| format!("m{i}")).collect::<Vec<_>>();
    assert_eq!(GroupKind::FullMesh(names(5)).pairs().len(), 10);
    let star = GroupKind::Star {
        hub: "h".into(),
        leaves: names(4),
    };
    assert!(star.pairs().iter().all(|(a, _)| *a == "h"));
    let sets = GroupKind::Sets(vec![names(2), vec!["x".into(), "y".into(), "z".into()]]);
    assert_eq!(sets.pairs().len(), 6);
    assert!(
        sets.pairs()
            .iter()
            .all(|(a, b)| a.starts_with('m') && !b.starts_with('m'))
    );
    let ring = GroupKind::Ring {
        members: names(10),
        k: 2,
    };
    assert_eq!(ring.pairs().len(), 20);
}

proptest! {
    /// A ring of n members with k: no pair twice or of one member with itself, and
    /// each member in 2k pairs, or in every pair when 2k reaches the others.
    #[test]
    fn a_ring_pairs_each_member_with_its_2k_neighbours(n in 2usize..40, k in 1usize..12) {
        prop_assume!(k < n);
        let members: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
        let ring = GroupKind::Ring { members: members.clone(), k };
        let pairs = ring.pairs();
        let mut seen = std::collections::BTreeSet::new();
        let mut degree: BTreeMap<&str, usize> = BTreeMap::new();
        for (a, b) in &pairs {
            prop_assert_ne!(a, b);
            prop_assert!(seen.insert((a.min(b).to_string(), a.max(b).to_string())));
            *degree.entry(a).or_default() += 1;
            *degree.entry(b).or_default() += 1;
        }
        let want = (2 * k).min(n - 1);
        for m in &members {
            prop_assert_eq!(degree.get(m.as_str()).copied().unwrap_or(0), want, "{}", m);
        }
    }
}

#[test]
fn an_inconsistent_description_is_refused_with_its_line_and_key() {
    let base = example();
    let member_lines = 6; // each [[member]] table and its blank line
    let cases: Vec<(String, usize, &str, &str)> = vec![
        (
            base.replace(
                "members = [\"a\", \"b\", \"c\"]",
                "members = [\"a\", \"b\", \"x\"]",
            ),
            4 * member_lines + 4,
            "group.members",
            "\"x\" is no member",
        ),
        (
            base.replacen("name = \"b\"", "name = \"a\"", 1),
            member_lines + 2,
            "member.name",
            "a second member named \"a\"",
        ),
        (
            base.replacen("address = \"10.0.0.2\"", "address = \"10.0.0.1\"", 1),
            member_lines + 3,
            "member.address",
            "another member's address",
        ),
        (
            base.replace(
                "hub = \"a\"\nmembers = [\"d\"]",
                "hub = \"a\"\nmembers = []",
            ),
            4 * member_lines + 10,
            "group.members",
            "pairs nobody",
        ),
        (
            base.replace("kind = \"star\"", "kind = \"circle\""),
            4 * member_lines + 11,
            "group.kind",
            "full-mesh, star, sets, ring or spread",
        ),
        (
            base.replacen(&format!("public-key = \"{}\"\n", public(3)), "", 1),
            2 * member_lines + 2,
            "member.public-key",
            "member \"c\" has no public-key while others do",
        ),
        (
            base.replacen(&public(2), &public(1), 1),
            member_lines + 5,
            "member.public-key",
            "each member needs a key pair of its own",
        ),
        (
            base.replace(
                "members = [\"a\", \"b\", \"c\"]",
                "members = [\"a\", \"b\", \"a\"]",
            ),
            4 * member_lines + 4,
            "group.members",
            "named twice",
        ),
        (
            format!(
                "{base}\n[[group]]\nname = \"again\"\nkind = \"full-mesh\"\nmembers = [\"b\", \"c\"]\nmethods = [\"pathchirp\"]\ninterval = \"1m\"\n"
            ),
            4 * member_lines + 21,
            "group.interval",
            "at another interval",
        ),
        (
            base.replace("interval = \"10m\"", "interval = \"often\""),
            4 * member_lines + 7,
            "group.interval",
            "",
        ),
        (
            base.replace(
                "transports = [\"mgrp\", \"udp\"]",
                "transports = [\"mgrp\", \"tcp\"]",
            ),
            4 * member_lines + 6,
            "group.transports",
            "mgrp or udp",
        ),
        (
            base.replacen("https://10.0.0.2:7700", "10.0.0.2:7700", 1),
            member_lines + 4,
            "member.api",
            "http://HOST:PORT or https://HOST:PORT",
        ),
        (
            base.replacen("https://10.0.0.2:7700", "https://10.0.0.2:0", 1),
            member_lines + 4,
            "member.api",
            "",
        ),
        (
            base.replacen(
                "api = \"https://10.0.0.2:7700\"",
                "api = \"https://10.0.0.2:7700\"\nmetrics = \"10.0.0.2:7700\"",
                1,
            ),
            member_lines + 5,
            "member.metrics",
            "a port of their own",
        ),
        (
            base.replacen(
                "api = \"https://10.0.0.2:7700\"",
                "api = \"https://10.0.0.2:7700\"\nmetrics = \"10.0.0.2\"",
                1,
            ),
            member_lines + 5,
            "member.metrics",
            "as HOST:PORT",
        ),
        (
            base.replacen("api =", "apy =", 1),
            4,
            "the file",
            "unknown field",
        ),
        (
            base.replace(
                "kind = \"full-mesh\"\nmembers = [\"a\", \"b\", \"c\"]",
                "kind = \"ring\"\nk = 3\nmembers = [\"a\", \"b\", \"c\"]",
            ),
            4 * member_lines + 4,
            "group.k",
            "k = 3",
        ),
    ];
    for (text, line, key, says) in cases {
        let e = Mesh::parse(&text).unwrap_err();
        assert!(
            e.line == line && e.key == key && e.message.contains(says),
            "want line {line}, {key}: {says}; got {e}\n{text}"
        );
    }
}

#[test]
fn the_fuzz_targets_seeds_are_descriptions_it_takes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/mesh");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let mesh = Mesh::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(mesh.plan("a").is_ok_and(|p| !p.links.is_empty()));
        n += 1;
    }
    assert!(n >= 4, "{n} seeds in {}", dir.display());
}

/// The example description in the guide's folder derives exactly the per-node files
/// committed beside it (`MESH_BLESS=1` rewrites them after a deliberate change).
#[test]
fn the_example_description_derives_the_committed_per_node_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/mesh");
    let mesh = Mesh::parse(&std::fs::read_to_string(dir.join("example.toml")).unwrap()).unwrap();
    let bless = std::env::var_os("MESH_BLESS").is_some();
    let mut files = 0;
    for name in mesh.members.keys() {
        let plan = mesh.plan(name).unwrap();
        for (kind, text) in [
            ("mgrpd", plan.mgrpd_toml()),
            ("overlay", plan.overlay_toml()),
        ] {
            let path = dir.join("derived").join(format!("{name}.{kind}.toml"));
            if bless {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &text).unwrap();
            }
            let committed = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                text,
                committed,
                "{} differs from its derivation",
                path.display()
            );
            files += 1;
        }
    }
    assert_eq!(files, 8);
    let derived = std::fs::read_dir(dir.join("derived")).unwrap().count();
    assert_eq!(derived, files, "a file in derived/ that no member derives");
}

#[test]
fn prometheus_finds_every_member_that_gives_an_address() {
    let text = example().replacen(
        "api = \"https://10.0.0.2:7700\"",
        "api = \"http://node-b.example.net:7700/\"\nmetrics = \"[2001:db8::2]:9577\"",
        1,
    );
    let mesh = Mesh::parse(&text).unwrap();
    let overlay = mesh.overlay_targets();
    assert_eq!(overlay.len(), 4);
    let b = &overlay[1];
    assert_eq!(b.targets, ["node-b.example.net:7700"]);
    assert_eq!(b.labels["member"], "b");
    assert_eq!(b.labels["__scheme__"], "http");
    assert_eq!(overlay[0].labels["__scheme__"], "https");
    let mgrpd = mesh.mgrpd_targets();
    assert_eq!(mgrpd.len(), 1, "only b gives its mgrpd's metrics");
    assert_eq!(mgrpd[0].targets, ["[2001:db8::2]:9577"]);
    assert_eq!(mgrpd[0].labels.keys().collect::<Vec<_>>(), ["member"]);
}

/// The example with networks behind a, b and c, which route for each other.
fn routed() -> String {
    let mut t = example();
    for (addr, nets) in [
        ("10.0.0.1", "[\"192.168.1.0/24\"]"),
        ("10.0.0.2", "[\"192.168.2.0/24\", \"172.16.2.0/24\"]"),
        ("10.0.0.3", "[\"192.168.3.0/24\"]"),
    ] {
        t = t.replacen(
            &format!("address = \"{addr}\"\n"),
            &format!("address = \"{addr}\"\nnetworks = {nets}\n"),
            1,
        );
    }
    t + "\n[routing]\nmembers = [\"a\", \"b\", \"c\"]\n"
}

#[test]
fn routing_members_relay_for_each_other_and_route_to_each_others_networks() {
    let mesh = Mesh::parse(&routed()).unwrap();
    let p = |s: &str| s.parse::<Prefix>().unwrap();
    let a = mesh.plan("a").unwrap();
    assert_eq!(a.local_prefixes, [p("192.168.1.0/24")]);
    let names = |v: &[PeerPlan]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a.mgrpd_peers), ["b", "c", "d"]);
    let b = &a.mgrpd_peers[0];
    assert_eq!(b.device.as_deref(), Some("mgrp-b"));
    // b speaks for its networks and for c's, which it may relay to a; through a it
    // may reach c's.
    assert_eq!(
        b.allowed_sources,
        [p("192.168.2.0/24"), p("172.16.2.0/24"), p("192.168.3.0/24")]
    );
    assert_eq!(b.relay_to, [p("192.168.3.0/24")]);
    // d measures with a but routes nothing.
    let d = &a.mgrpd_peers[2];
    assert!(d.device.is_none() && d.allowed_sources.is_empty() && d.relay_to.is_empty());
    let r = a.routing.as_ref().unwrap();
    let members: Vec<(&str, &str, Vec<String>)> = r
        .members
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                m.device.as_str(),
                m.networks.iter().map(ToString::to_string).collect(),
            )
        })
        .collect();
    assert_eq!(
        members,
        [
            (
                "b",
                "mgrp-b",
                vec!["192.168.2.0/24".into(), "172.16.2.0/24".into()]
            ),
            ("c", "mgrp-c", vec!["192.168.3.0/24".into()]),
        ]
    );
    let api = r.members[0].api.as_ref().unwrap();
    assert_eq!(
        (api.addr.to_string(), api.tls),
        ("10.0.0.2:7700".into(), true)
    );
    // A member outside routing has no route control and no relays.
    let d = mesh.plan("d").unwrap();
    assert!(d.routing.is_none() && d.local_prefixes.is_empty());
    assert_eq!(d.mgrpd_peers, d.peers);
    // A routing member it measures nothing with is still its mgrpd's peer; an API
    // named by host is reached at the member's address, the name checked in its
    // certificate.
    let text = routed()
        .replace(
            "members = [\"a\", \"b\", \"c\"]\nmethods",
            "members = [\"a\", \"b\"]\nmethods",
        )
        .replacen("https://10.0.0.3:7700", "https://c.example.net:7443", 1);
    let mesh = Mesh::parse(&text).unwrap();
    let b = mesh.plan("b").unwrap();
    assert_eq!(names(&b.peers), ["a"]);
    assert_eq!(names(&b.mgrpd_peers), ["a", "c"]);
    let c = &b.routing.as_ref().unwrap().members[1];
    let api = c.api.as_ref().unwrap();
    assert_eq!(
        (api.addr.to_string(), api.tls_name.as_deref()),
        ("10.0.0.3:7443".into(), Some("c.example.net"))
    );
    // In clear, a name is only where the member's API is reached: no certificate.
    let plain =
        Mesh::parse(&text.replacen("https://c.example.net", "http://c.example.net", 1)).unwrap();
    let c = &plain.plan("b").unwrap().routing.unwrap().members[1];
    let api = c.api.as_ref().unwrap();
    assert_eq!((api.tls, api.tls_name.as_deref()), (false, None));
    // Derived files say the same.
    let files = mesh.plan("b").unwrap();
    let mgrpd = files.mgrpd_toml();
    assert!(
        mgrpd.contains("local-prefixes = [\"192.168.2.0/24\", \"172.16.2.0/24\"]"),
        "{mgrpd}"
    );
    assert!(mgrpd.contains("device = \"mgrp-c\"\nallowed-sources = [\"192.168.1.0/24\", \"192.168.3.0/24\"]\nrelay-to = [\"192.168.1.0/24\"]"), "{mgrpd}");
    let overlay = files.overlay_toml();
    assert!(
        overlay.contains("[routing]\naddress = \"10.0.0.2\"\n"),
        "{overlay}"
    );
    assert!(
        overlay.contains("api = \"10.0.0.3:7443\"\ntls = true\ntls-name = \"c.example.net\""),
        "{overlay}"
    );
}

#[test]
fn inconsistent_routing_is_refused_with_its_line_and_key() {
    let base = routed();
    let cases: Vec<(String, &str, &str, &str)> = vec![
        (
            base.replace(
                "[routing]\nmembers = [\"a\", \"b\", \"c\"]",
                "[routing]\nmembers = [\"a\", \"b\", \"x\"]",
            ),
            "\"x\"]",
            "routing.members",
            "\"x\" is no member",
        ),
        (
            base.replace(
                "[routing]\nmembers = [\"a\", \"b\", \"c\"]",
                "[routing]\nmembers = [\"a\"]",
            ),
            "[routing]",
            "routing.members",
            "two routing members at least",
        ),
        (
            base.replace(&format!("public-key = \"{}\"\n", public(1)), "")
                .replace(&format!("public-key = \"{}\"\n", public(2)), "")
                .replace(&format!("public-key = \"{}\"\n", public(3)), "")
                .replace(&format!("public-key = \"{}\"\n", public(4)), ""),
            "[routing]",
            "routing.members",
            "which takes keys",
        ),
        (
            base.replace(
                "address = \"10.0.0.4\"\n",
                "address = \"10.0.0.4\"\nnetworks = [\"192.168.4.0/24\"]\n",
            ),
            "\"192.168.4.0/24\"",
            "member.networks",
            "member \"d\" is no routing member",
        ),
        (
            base.replace("\"192.168.3.0/24\"", "\"fd00:3::/64\""),
            "\"fd00:3::/64\"",
            "member.networks",
            "IPv4 prefixes only",
        ),
        (
            base.replace("\"192.168.3.0/24\"", "\"192.168.3.0/33\""),
            "\"192.168.3.0/33\"",
            "member.networks",
            "a prefix such as",
        ),
        (
            base.replace("\"192.168.3.0/24\"", "\"10.0.0.0/24\""),
            "\"10.0.0.0/24\"",
            "member.networks",
            "holds member \"a\"'s address 10.0.0.1",
        ),
        (
            base.replace("\"192.168.3.0/24\"", "\"192.168.2.128/25\""),
            "\"192.168.2.128/25\"",
            "member.networks",
            "overlaps 192.168.2.0/24, member \"b\"'s",
        ),
        (
            base.replace(
                "\"192.168.3.0/24\"",
                "\"192.168.3.0/24\", \"192.168.3.0/24\"",
            ),
            "\"192.168.3.0/24\", ",
            "member.networks",
            "named twice",
        ),
        (
            base.replace("name = \"c\"", "name = \"c23456789ab\"")
                .replace("\"c\"", "\"c23456789ab\""),
            "name = \"c23456789ab\"",
            "member.name",
            "longer than an interface name may be (15): give device",
        ),
        (
            base.replace(
                "address = \"10.0.0.3\"\n",
                "address = \"10.0.0.3\"\ndevice = \"mgrp-b\"\n",
            ),
            "device = \"mgrp-b\"",
            "member.device",
            "member \"b\"'s too",
        ),
        (
            base.replace(
                "address = \"10.0.0.3\"\n",
                "address = \"10.0.0.3\"\ndevice = \"to c\"\n",
            ),
            "device = \"to c\"",
            "member.device",
            "not an interface name",
        ),
    ];
    for (text, at, key, says) in cases {
        // The line of the last occurrence the case put in.
        let line = text[..text.rfind(at).unwrap_or_else(|| panic!("{at} in {text}"))]
            .matches('\n')
            .count()
            + 1;
        let e = Mesh::parse(&text).unwrap_err();
        assert!(
            e.line == line && e.key == key && e.message.contains(says),
            "want line {line}, {key}: {says}; got {e}\n{text}"
        );
    }
}

#[test]
fn a_spread_group_pairs_each_member_with_2k_others_across_its_list() {
    for (n, k) in [(5, 2), (16, 2), (16, 3), (100, 4), (1000, 4), (9, 4)] {
        let names: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
        let kind = GroupKind::Spread {
            members: names.clone(),
            k,
        };
        let pairs = kind.pairs();
        assert_eq!(pairs.len(), n * k, "n {n}, k {k}");
        let mut degree: BTreeMap<&str, usize> = BTreeMap::new();
        for (a, b) in &pairs {
            assert_ne!(a, b);
            *degree.entry(a).or_default() += 1;
            *degree.entry(b).or_default() += 1;
        }
        assert!(
            degree.values().all(|&d| d == 2 * k),
            "n {n}, k {k}: {degree:?}"
        );
        // Across the list: some pair spans more than a third of it.
        let index = |s: &str| s[1..].parse::<usize>().unwrap();
        let span = pairs
            .iter()
            .map(|(a, b)| {
                let d = index(a).abs_diff(index(b));
                d.min(n - d)
            })
            .max()
            .unwrap();
        assert!(span * 3 >= n, "n {n}, k {k}: widest {span}");
    }
}
