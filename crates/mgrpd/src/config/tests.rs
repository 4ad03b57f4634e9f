use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser as _;
use ipnet::IpNet;
use mgrp_core::planner::{Encap, HoldMode, Packing};
use mgrp_core::wire::Version;

use super::flags::parse_wire;
use super::*;
use crate::routes::SourcePlan;

#[test]
fn durations() {
    assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
    assert_eq!(parse_duration("150us"), Ok(Duration::from_micros(150)));
    assert_eq!(parse_duration("150µs"), Ok(Duration::from_micros(150)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert!(parse_duration("10").unwrap_err().contains("unit"));
    assert!(parse_duration("ms").is_err());
    // Minutes and hours, and spans written together, as operators write them.
    assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
    assert!(parse_duration("2h").unwrap_err().contains("at most 1h"));
    // In a file too.
    let c = Config::from_toml("[limits]\nmax-train-duration = \"1m\"").unwrap();
    assert_eq!(c.max_train_duration, Duration::from_secs(60));
}

#[test]
fn defaults() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.tun, "mgrp0");
    assert_eq!(c.protocol, 253);
    assert_eq!(c.policy.hold, Duration::from_millis(10));
    // Nothing waits and nothing is routed into the tunnel while nobody measures.
    assert_eq!(c.policy.hold_mode, HoldMode::OnDemand);
    assert!(c.route_on_demand);
    assert_eq!(c.busy_poll_margin, Duration::from_micros(150));
    assert_eq!(c.socket, PathBuf::from("/run/mgrp/mgrpd.sock"));
}

/// `pacer-cpu` takes a CPU's number or a word, in a file and as a flag; the flag wins.
#[test]
fn the_pacers_cpu_by_number_or_word() {
    assert_eq!(Config::from_toml("").unwrap().pacer_cpu, PacerCpu::Auto);
    for (text, want) in [
        ("pacer-cpu = 3", PacerCpu::Cpu(3)),
        ("pacer-cpu = \"auto\"", PacerCpu::Auto),
        ("pacer-cpu = \"none\"", PacerCpu::Unpinned),
    ] {
        assert_eq!(Config::from_toml(text).unwrap().pacer_cpu, want, "{text}");
    }
    for text in [
        "pacer-cpu = \"first\"",
        "pacer-cpu = -1",
        "pacer-cpu = \"1.5\"",
    ] {
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(e.contains("pacer-cpu"), "{text}: {e}");
    }
    for (flag, want) in [("none", PacerCpu::Unpinned), ("0", PacerCpu::Cpu(0))] {
        let cli = Cli::parse_from(["mgrpd", "--pacer-cpu", flag]);
        let c = Config::merge(toml::from_str("pacer-cpu = 1").unwrap(), &cli).unwrap();
        assert_eq!(c.pacer_cpu, want);
    }
    assert!(Cli::try_parse_from(["mgrpd", "--pacer-cpu", "last"]).is_err());
}

#[test]
fn file_and_flags() {
    let c = keyed(
        r#"
        tun = "m1"
        routes = ["10.9.0.0/24"]
        hold = "5ms"
        hold-mode = "on-demand"
        local-prefixes = ["10.200.0.0/16"]
        [piggyback]
        packing = "multiple"
        max-train-fraction = 0.5
        first-n = 10
        [via]
        "10.9.0.7" = "10.9.0.1"
        [[peers]]
        prefix = "10.50.0.0/24"
        allowed-sources = ["192.168.0.0/16"]
        "#,
    )
    .unwrap();
    assert_eq!(c.tun, "m1");
    assert_eq!(c.policy.packing, Packing::Multiple);
    assert_eq!(c.policy.first_n, Some(10));
    assert!(c.route_on_demand);
    assert_eq!(
        c.peer_of("10.9.0.7".parse().unwrap()),
        "10.9.0.1".parse::<IpAddr>().unwrap()
    );
    assert_eq!(
        c.peer_of("10.9.0.8".parse().unwrap()),
        "10.9.0.8".parse::<IpAddr>().unwrap()
    );
    // Peers: the route, the via target, the table; nobody else.
    for (ip, peer) in [
        ("10.9.0.200", true),
        ("10.9.0.1", true),
        ("10.50.0.3", true),
        ("10.9.1.1", false),
        ("10.50.1.3", false),
    ] {
        assert_eq!(c.peering().peers.is_peer(ip.parse().unwrap()), peer, "{ip}");
    }
    let peering = c.peering();
    let table = peering.peers.find("10.50.0.3".parse().unwrap()).unwrap();
    assert_eq!(table.allowed_sources.len(), 1);
    assert_eq!(c.peering().peers.local().len(), 1);
    let cli = Cli::parse_from(["mgrpd", "--peer", "fd00::/64", "--local", "10.1.2.3"]);
    let c = Config::merge(Settings::default(), &cli).unwrap();
    assert!(c.peering().peers.is_peer("fd00::9".parse().unwrap()));
    assert!(!c.peering().peers.is_peer("10.9.0.200".parse().unwrap()));
    assert_eq!(c.peering().peers.local().len(), 1);

    let cli = Cli::parse_from([
        "mgrpd",
        "--hold",
        "2ms",
        "--route",
        "10.1.0.0/16",
        "--fwmark",
        "0x10",
    ]);
    let c = Config::merge(toml::from_str("hold = \"5ms\"").unwrap(), &cli).unwrap();
    assert_eq!(c.policy.hold, Duration::from_millis(2));
    assert_eq!(c.fwmark, 0x10);
    assert_eq!(
        c.peering().routes,
        ["10.1.0.0/16".parse::<IpNet>().unwrap()]
    );
}

#[test]
fn strict_reverse_path_filtering_only_where_routes_lead_back() {
    let permanent =
        "hold-mode = \"on-demand\"\nroute-on-demand = false\nroutes = [\"10.1.0.0/16\"]\n";
    let c = Config::from_toml(permanent).unwrap();
    assert_eq!(c.strict_rp_filter(), Ok(()));
    // On demand, the route back exists only while trains run.
    let c = Config::from_toml("hold-mode = \"on-demand\"\nroutes = [\"10.1.0.0/16\"]").unwrap();
    assert!(c.strict_rp_filter().is_err());
    // Holding always keeps the routes installed; the default is on demand.
    let c = Config::from_toml("hold-mode = \"always\"\nroutes = [\"10.1.0.0/16\"]").unwrap();
    assert_eq!(c.strict_rp_filter(), Ok(()));
    let c = Config::from_toml("routes = [\"10.1.0.0/16\"]").unwrap();
    assert!(c.strict_rp_filter().is_err());
    // A peer outside the routes, or a source outside them, needs loose filtering.
    let c = Config::from_toml(&format!(
        "{permanent}[[peers]]\nprefix = \"192.0.2.1/32\"\n"
    ))
    .unwrap();
    assert!(c.strict_rp_filter().is_err());
    let c = keyed(&format!(
        "{permanent}[[peers]]\nprefix = \"10.1.0.1/32\"\nallowed-sources = [\"10.0.0.0/8\"]\n"
    ))
    .unwrap();
    assert!(c.strict_rp_filter().is_err());
    let c = keyed(&format!(
        "{permanent}[[peers]]\nprefix = \"10.1.0.1/32\"\nallowed-sources = [\"10.1.2.0/24\"]\n"
    ))
    .unwrap();
    assert_eq!(c.strict_rp_filter(), Ok(()));
}

#[test]
fn wire_versions_default_to_2_and_are_chosen_per_peer() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let base = "routes = [\"10.0.0.2/32\"]\n";
    let c = Config::from_toml(base).unwrap();
    assert_eq!(c.peering().encap.wire_for_peer(ip("10.0.0.2")), Version::V2);
    let c = Config::from_toml(&format!(
        "{base}wire = 1\n[[peers]]\nprefix = \"10.0.1.0/24\"\nwire = 2\n"
    ))
    .unwrap();
    assert_eq!(c.peering().encap.wire_for_peer(ip("10.0.0.2")), Version::V1);
    assert_eq!(c.peering().encap.wire_for_peer(ip("10.0.1.7")), Version::V2);
    assert_eq!(
        c.peering().encap.path(ip("10.0.1.7"), 1500).wire,
        Version::V2
    );
    let e = Config::from_toml(&format!("{base}wire = 3\n")).unwrap_err();
    assert!(e.to_string().contains("use 1 or 2"), "{e}");
    assert_eq!(parse_wire("1"), Ok(Version::V1));
    assert!(parse_wire("v2").is_err());
}

#[test]
fn a_route_sources_from_the_configured_address_else_towards_its_peers_endpoint() {
    use std::net::SocketAddr;
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let net = |s: &str| s.parse::<IpNet>().unwrap();
    let text = "routes = [\"10.0.0.2/32\", \"10.0.5.0/24\", \"10.0.6.0/24\", \"2001:db8::2/128\"]\n\
                source = [\"192.0.2.1\"]\n\
                via = { \"10.0.7.1\" = \"10.0.0.2\" }\n\
                [[peers]]\nprefix = \"10.0.5.0/24\"\nsource = \"198.51.100.1\"\n\
                [[peers]]\nprefix = \"10.0.6.0/24\"\nencap = \"udp\"\nendpoint = \"203.0.113.6:4253\"\n";
    let c = Config::from_toml(text).unwrap();
    let none = |_: IpAddr| None::<SocketAddr>;
    // A peer's own source, then the default of the family.
    assert_eq!(
        c.source_plan(net("10.0.5.0/24"), none),
        SourcePlan::Configured(ip("198.51.100.1"))
    );
    assert_eq!(
        c.source_plan(net("10.0.0.2/32"), none),
        SourcePlan::Configured(ip("192.0.2.1"))
    );
    // No IPv6 source configured: towards the peer itself (raw IP).
    assert_eq!(
        c.source_plan(net("2001:db8::2/128"), none),
        SourcePlan::Toward {
            peer: ip("2001:db8::2"),
            endpoint: ip("2001:db8::2")
        }
    );
    let c = Config::from_toml(&text.replace("source = [\"192.0.2.1\"]\n", "")).unwrap();
    // Traffic via a peer: towards that peer.
    assert_eq!(
        c.source_plan(net("10.0.7.1/32"), none),
        SourcePlan::Toward {
            peer: ip("10.0.0.2"),
            endpoint: ip("10.0.0.2")
        }
    );
    // A UDP peer: towards its endpoint, a learned one first.
    assert_eq!(
        c.source_plan(net("10.0.6.0/24"), none),
        SourcePlan::Toward {
            peer: ip("10.0.6.0"),
            endpoint: ip("203.0.113.6")
        }
    );
    let learned = |_: IpAddr| Some("203.0.113.99:61000".parse::<SocketAddr>().unwrap());
    assert_eq!(
        c.source_plan(net("10.0.6.0/24"), learned),
        SourcePlan::Toward {
            peer: ip("10.0.6.0"),
            endpoint: ip("203.0.113.99")
        }
    );
    for (bad, says) in [
        (
            "source = [\"192.0.2.1\", \"192.0.2.2\"]",
            "at most one IPv4 address",
        ),
        ("source = \"0.0.0.0\"", "not unspecified"),
        ("source = \"127.0.0.1\"", "loopback"),
        (
            "[[peers]]\nprefix = \"10.0.9.0/24\"\nsource = \"2001:db8::1\"",
            "not of the peer's address family",
        ),
    ] {
        let e = Config::from_toml(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let cli = Cli::parse_from(["mgrpd", "--source", "192.0.2.3", "--route", "10.0.0.2/32"]);
    let c = Config::merge(Settings::default(), &cli).unwrap();
    assert_eq!(
        c.peering().sources.for_peer(ip("10.0.0.2")),
        Some(ip("192.0.2.3"))
    );
    assert_eq!(c.peering().sources.for_peer(ip("2001:db8::2")), None);
}

/// `text` with a top-level `key-file` (a private file holding `byte` 32 times);
/// the file is removed once read.
fn keyed_with(text: &str, byte: &str) -> Result<Config, ConfigError> {
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "mgrpd-keyed-{}-{}.key",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, byte.repeat(32)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Config::from_toml(&format!("key-file = \"{}\"\n{text}", path.display()));
    let _ = std::fs::remove_file(&path);
    c
}

fn keyed(text: &str) -> Result<Config, ConfigError> {
    keyed_with(text, "5a")
}

#[test]
fn relaying_and_speaking_for_others_need_a_key() {
    for table in [
        "allowed-sources = [\"10.7.0.0/24\"]",
        "relay-to = [\"10.9.0.0/24\"]",
    ] {
        let text = format!("[[peers]]\nprefix = \"10.0.0.2/32\"\n{table}\n");
        let e = Config::from_toml(&text).unwrap_err().to_string();
        assert!(
            e.contains("but no key") && e.contains("mgrpd genkey"),
            "{e}"
        );
        assert!(keyed(&text).is_ok());
    }
}

#[test]
fn tag_versions_and_the_state_directory() {
    let c = keyed("routes = [\"10.0.0.2/32\"]").unwrap();
    assert_eq!(c.auth, Scheme::V3);
    assert_eq!(c.state_dir, PathBuf::from("/var/lib/mgrp"));
    let c = keyed("auth = 1\nstate-dir = \"/tmp/s\"\nroutes = [\"10.0.0.2/32\"]").unwrap();
    assert_eq!((c.auth, c.state_dir), (Scheme::V1, PathBuf::from("/tmp/s")));
    let c = keyed("auth = 2\nroutes = [\"10.0.0.2/32\"]").unwrap();
    assert_eq!(c.auth, Scheme::V2);
    let e = keyed("auth = 4").unwrap_err().to_string();
    assert!(e.contains("use 3"), "{e}");
    // The oldest version taken: the --auth one unless said, never above it.
    assert_eq!(c.auth_accept, Scheme::V2);
    let c = keyed("auth-accept = 2\nroutes = [\"10.0.0.2/32\"]").unwrap();
    assert_eq!((c.auth, c.auth_accept), (Scheme::V3, Scheme::V2));
    let e = keyed("auth = 2\nauth-accept = 3").unwrap_err().to_string();
    assert!(e.contains("auth-accept = 3 is above auth = 2"), "{e}");
    let e = Config::from_toml("next-key-file = \"/nonexistent\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("give key-file too"), "{e}");
}

#[test]
fn udp_peers_their_endpoints_and_who_roams() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir();
    let key = |name: &str, byte: &str| {
        let path = dir.join(format!("mgrpd-udp-{}-{name}.key", std::process::id()));
        std::fs::write(&path, byte.repeat(32)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    };
    let (ka, kb) = (key("a", "a1"), key("b", "b2"));
    let text = format!(
        "routes = [\"10.0.0.2/32\"]\nencap = \"udp:5000\"\nkey-file = \"{}\"\n\
         [[peers]]\nprefix = \"10.0.1.2/32\"\nkey-file = \"{}\"\nkeepalive = \"25s\"\n\
         [[peers]]\nprefix = \"10.0.2.0/24\"\nencap = \"udp:6000\"\nendpoint = \"192.0.2.9:7000\"\n\
         [[peers]]\nprefix = \"10.0.3.0/24\"\nencap = \"raw\"\n",
        kb.display(),
        ka.display()
    );
    let c = Config::from_toml(&text).unwrap();
    assert_eq!(c.peering().udp.port, 5000);
    assert!(!c.route_on_demand, "UDP peers keep their routes");
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(c.peering().encap.for_peer(ip("10.0.0.2")), Encap::Udp);
    assert_eq!(c.peering().encap.for_peer(ip("10.0.3.1")), Encap::Raw);
    // The host with a key of its own roams: nowhere to send until heard from.
    let peering = c.peering();
    let a = peering.udp.peer(ip("10.0.1.2")).unwrap();
    assert!(a.roams && a.keepalive == Some(Duration::from_secs(25)));
    assert_eq!(c.peering().udp.configured_endpoint(ip("10.0.1.2")), None);
    // A prefix with an endpoint goes there; a route's peer to its own address.
    let e: std::net::SocketAddr = "192.0.2.9:7000".parse().unwrap();
    assert_eq!(c.peering().udp.configured_endpoint(ip("10.0.2.5")), Some(e));
    assert!(!c.peering().udp.peer(ip("10.0.2.5")).unwrap().roams);
    assert_eq!(
        c.peering().udp.configured_endpoint(ip("10.0.0.2")),
        Some("10.0.0.2:5000".parse().unwrap())
    );

    // A roaming peer's key must be its own.
    let shared = format!(
        "routes = [\"10.0.0.2/32\"]\nkey-file = \"{0}\"\nencap = \"udp\"\n[[peers]]\nprefix = \"10.0.1.2/32\"\nkey-file = \"{0}\"\n",
        ka.display()
    );
    let e = Config::from_toml(&shared).unwrap_err().to_string();
    assert!(e.contains("must be its own"), "{e}");
    for (bad, says) in [
        ("encap = \"udp:0\"", "udp:PORT"),
        ("encap = \"tcp\"", "udp:PORT"),
        ("encap = \"udp\"\nroute-on-demand = true", "route-on-demand"),
        (
            "[[peers]]\nprefix = \"10.0.9.0/24\"\nencap = \"udp\"\nkeepalive = \"25s\"",
            "one host",
        ),
        (
            "[[peers]]\nprefix = \"10.0.9.1/32\"\nencap = \"udp\"\nkeepalive = \"100ms\"",
            "at least 1s",
        ),
        (
            "[[peers]]\nprefix = \"10.0.9.1/32\"\nendpoint = \"192.0.2.1:1\"",
            "need encap",
        ),
    ] {
        let e = Config::from_toml(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let cli = Cli::parse_from(["mgrpd", "--encap", "udp:4300"]);
    let c = Config::merge(Settings::default(), &cli).unwrap();
    assert_eq!(
        (c.peering().udp.port, c.peering().encap.default),
        (4300, Encap::Udp)
    );
    let _ = (std::fs::remove_file(ka), std::fs::remove_file(kb));
}

#[test]
fn routes_to_udp_peers_take_the_mtu_of_one_continuation() {
    let net = |s: &str| s.parse::<IpNet>().unwrap();
    let raw = Config::from_toml("routes = [\"10.0.0.0/16\"]\n").unwrap();
    assert_eq!(
        raw.route_mtu(net("10.0.0.0/16")),
        None,
        "raw peers: the TUN's"
    );
    let text = "routes = [\"10.0.0.0/16\", \"10.9.0.2/32\", \"fd00::2/128\"]\nencap = \"raw\"\n\
                [[peers]]\nprefix = \"10.0.5.0/24\"\nencap = \"udp\"\n\
                [[peers]]\nprefix = \"fd00::/64\"\nencap = \"udp\"\nwire = 1\n";
    let c = Config::from_toml(text).unwrap();
    // IPv4 20 + UDP 8 + a continuation's 2 + a whole rider's 2.
    assert_eq!(c.route_mtu(net("10.0.5.0/24")), Some(1500 - 32));
    // A route holding a UDP peer's prefix takes its MTU too; one holding none not.
    assert_eq!(c.route_mtu(net("10.0.0.0/16")), Some(1500 - 32));
    assert_eq!(c.route_mtu(net("10.9.0.2/32")), None);
    // IPv6 40 + UDP 8 + version 1's 28 and 12.
    assert_eq!(c.route_mtu(net("fd00::2/128")), Some(1500 - 88));
}

#[test]
fn example_config_is_valid() {
    let c = Config::from_toml(include_str!("../../mgrpd.example.toml")).unwrap();
    assert_eq!(c.peering().routes.len(), 2);
    assert_eq!(c.policy.max_queued_bytes, 4_194_304);
    assert_eq!(c.reassembly.timeout, Duration::from_secs(1));
}

#[test]
fn next_hop_devices_and_relay_prefixes() {
    let c = keyed(
        "[[peers]]\nprefix = \"10.0.0.2/32\"\nencap = \"udp\"\ndevice = \"mgrp-n\"\n\
         allowed-sources = [\"10.7.0.0/24\"]\nrelay-to = [\"10.9.0.0/24\"]\n\
         [[peers]]\nprefix = \"10.0.0.3/32\"\n",
    )
    .unwrap();
    assert_eq!(
        c.next_hops,
        vec![NextHopDevice {
            name: "mgrp-n".into(),
            peer: "10.0.0.2".parse().unwrap()
        }]
    );
    let peering = c.peering();
    let member = peering.peers.find("10.0.0.2".parse().unwrap()).unwrap();
    assert_eq!(member.relay_to, vec!["10.9.0.0/24".parse().unwrap()]);
    assert!(
        c.peering()
            .peers
            .find("10.0.0.3".parse().unwrap())
            .unwrap()
            .relay_to
            .is_empty()
    );
    for (text, says) in [
        ("prefix = \"10.0.0.0/24\"\ndevice = \"mgrp-n\"", "one host"),
        ("prefix = \"10.0.0.2/32\"\ndevice = \"mgrp0\"", "used twice"),
        (
            "prefix = \"10.0.0.2/32\"\ndevice = \"a-very-long-device-name\"",
            "interface name",
        ),
    ] {
        let e = Config::from_toml(&format!("[[peers]]\n{text}\n")).unwrap_err();
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[test]
fn errors_name_the_key() {
    let e = Config::from_toml("holdd = \"5ms\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("holdd"), "{e}");
    let e = Config::from_toml("hold = \"5\"").unwrap_err().to_string();
    assert!(e.contains("unit"), "{e}");
    let e = Config::from_toml("table = 254").unwrap_err().to_string();
    assert!(e.contains("reserved"), "{e}");
    let e = Config::from_toml("[piggyback]\nmax-train-fraction = 2.0")
        .unwrap_err()
        .to_string();
    assert!(e.contains("max-train-fraction"), "{e}");
    let e = Config::from_toml("tun = \"a/b\"").unwrap_err().to_string();
    assert!(e.contains("interface name"), "{e}");
    let e = Config::from_toml("[piggyback]\nmax-held-bytes = 1000")
        .unwrap_err()
        .to_string();
    assert!(e.contains("max-held-bytes"), "{e}");
    let e = Config::from_toml("[limits]\nmax-destinations = 0")
        .unwrap_err()
        .to_string();
    assert!(e.contains("max-destinations"), "{e}");
}

#[test]
fn keys_come_from_private_files_and_every_peer_needs_one() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir();
    let key = dir.join(format!("mgrpd-test-{}.key", std::process::id()));
    std::fs::write(&key, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let toml = format!(
        "routes = [\"10.0.0.2/32\"]\nkey-file = \"{}\"",
        key.display()
    );
    let e = Config::from_toml(&toml).unwrap_err().to_string();
    assert!(e.contains("chmod 600"), "{e}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Config::from_toml(&toml).unwrap();
    assert!(c.peering().keys.enabled());
    assert_eq!(c.policy.trailer_len, TRAILER_LEN);
    assert!(
        c.peering()
            .keys
            .key_for("10.0.0.2".parse().unwrap())
            .is_some()
    );
    assert!(
        !format!("{c:?}").contains(&"ab".repeat(32)),
        "keys never print"
    );
    // A per-peer key only: the route's peer has none.
    let toml = format!(
        "routes = [\"10.0.0.2/32\"]\n[[peers]]\nprefix = \"10.0.1.0/24\"\nkey-file = \"{}\"",
        key.display()
    );
    let e = Config::from_toml(&toml).unwrap_err().to_string();
    assert!(e.contains("10.0.0.2/32 has no key"), "{e}");
    std::fs::write(&key, "short").unwrap();
    let toml = format!("key-file = \"{}\"", key.display());
    let e = Config::from_toml(&toml).unwrap_err().to_string();
    assert!(e.contains("mgrpd genkey"), "{e}");
    let _ = std::fs::remove_file(&key);
    assert!(!Config::from_toml("").unwrap().peering().keys.enabled());
}

#[test]
fn the_summary_says_what_is_in_force_and_shows_no_key() {
    let c = keyed(
        "routes = [\"10.9.0.0/24\"]\nhold = \"5ms\"\n[[peers]]\nprefix = \"10.0.6.1/32\"\nrelay-to = [\"10.77.0.0/16\"]\n",
    )
    .unwrap();
    let text = c.summary();
    for says in [
        "wait up to 5ms while a train",
        "authenticated (tags version 3)",
        "peers: 2\n",
        "\n  10.9.0.0/24: raw IP, wire 2, key: the shared one\n",
        "\n  10.0.6.1/32: raw IP, wire 2, key: the shared one, relays to 10.77.0.0/16\n",
        "log level info",
    ] {
        assert!(text.contains(says), "{says:?} not in\n{text}");
    }
    // The key file holds the hex digits 5a 32 times: they appear nowhere.
    assert!(!text.to_ascii_lowercase().contains("5a5a"), "{text}");
    let unkeyed = Config::from_toml("routes = [\"10.9.0.0/24\"]")
        .unwrap()
        .summary();
    assert!(unkeyed.contains("not authenticated (no key)"), "{unkeyed}");
    assert!(!unkeyed.contains("key:"), "{unkeyed}");
}

#[test]
fn genkey_is_a_command_of_its_own() {
    use clap::CommandFactory as _;
    let cli = Cli::try_parse_from(["mgrpd", "genkey"]).unwrap();
    assert!(matches!(
        cli.command,
        Some(Command::Genkey { private: false })
    ));
    let cli = Cli::try_parse_from(["mgrpd", "genkey", "--private"]).unwrap();
    assert!(matches!(
        cli.command,
        Some(Command::Genkey { private: true })
    ));
    let cli = Cli::try_parse_from(["mgrpd", "pubkey"]).unwrap();
    assert!(matches!(cli.command, Some(Command::Pubkey)));
    assert!(Cli::try_parse_from(["mgrpd"]).unwrap().command.is_none());
    // It runs no daemon, so daemon flags beside it are refused, not ignored.
    assert!(Cli::try_parse_from(["mgrpd", "--tun", "m1", "genkey"]).is_err());
    let help = Cli::command().render_long_help().to_string();
    assert!(help.contains("genkey"), "{help}");
}

#[test]
fn log_lines_are_text_or_json() {
    use mgrp_service::logging::LogFormat;
    assert_eq!(Config::from_toml("").unwrap().log_format, LogFormat::Text);
    let c = Config::from_toml("log-format = \"json\"").unwrap();
    assert_eq!(c.log_format, LogFormat::Json);
    let e = Config::from_toml("log-format = \"xml\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("text or json"), "{e}");
    let cli = Cli::parse_from(["mgrpd", "--log-format", "json"]);
    assert_eq!(
        Config::merge(Settings::default(), &cli).unwrap().log_format,
        LogFormat::Json
    );
}

#[test]
fn peers_may_be_named_once_each() {
    let c = Config::from_toml(
        "[[peers]]\nprefix = \"10.0.0.2/32\"\nname = \"berlin\"\n\
         [[peers]]\nprefix = \"10.0.0.3/32\"\n",
    )
    .unwrap();
    assert_eq!(
        c.peering().peer_names,
        vec![("10.0.0.2/32".parse().unwrap(), "berlin".to_owned())]
    );
    assert!(
        c.summary().contains("10.0.0.2/32 (berlin): "),
        "{}",
        c.summary()
    );
    for (text, says) in [
        (
            "[[peers]]\nprefix = \"10.0.0.2/32\"\nname = \"a b\"\n",
            "peer 10.0.0.2/32: name: \"a b\"",
        ),
        (
            "[[peers]]\nprefix = \"10.0.0.2/32\"\nname = \"x\"\n\
             [[peers]]\nprefix = \"10.0.0.3/32\"\nname = \"x\"\n",
            "more than one peer",
        ),
    ] {
        let e = Config::from_toml(text).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
    }
}

/// The guide and the example configuration quote the pacer's numbers: the defaults
/// of its settings and the constants behind how it spins.
#[test]
fn the_guide_and_the_example_quote_the_pacers_numbers() {
    use crate::pacer::{BREATHER, MAX_SPIN_RUN, MIN_SLEEP};
    let read = |p: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(p);
        let text = std::fs::read_to_string(&path).unwrap();
        // One line of words, comments' markers left out.
        text.lines()
            .flat_map(|l| l.trim_start().trim_start_matches('#').split_whitespace())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let guide = read("../../docs/mgrpd.md");
    let example = read("mgrpd.example.toml");
    let s = Settings::default();
    let us = |d: Duration| d.as_micros();
    let ms = |d: Duration| d.as_millis();
    for said in [
        format!(
            "`busy-poll-margin` ({} µs) before each probe",
            us(s.busy_poll_margin)
        ),
        format!(
            "too short for a sleep of {} µs before the margin",
            us(MIN_SLEEP)
        ),
        format!("never spins longer than {} ms", ms(MAX_SPIN_RUN)),
        format!("waits {} µs more and leaves late", us(BREATHER)),
        format!("spins at most {} ms per train", ms(s.limits.max_train_spin)),
    ] {
        assert!(guide.contains(&said), "docs/mgrpd.md does not say {said:?}");
    }
    for said in [
        format!("busy-poll-margin = \"{}us\"", us(s.busy_poll_margin)),
        format!("shorter than that margin plus {} us", us(MIN_SLEEP)),
        format!("max-train-spin = \"{}ms\"", ms(s.limits.max_train_spin)),
    ] {
        assert!(
            example.contains(&said),
            "mgrpd.example.toml does not say {said:?}"
        );
    }
}

/// A private file holding `text`, removed when dropped.
struct PrivateFile(PathBuf);

impl PrivateFile {
    fn new(name: &str, text: &str) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let path =
            std::env::temp_dir().join(format!("mgrpd-pair-{}-{name}.key", std::process::id()));
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Self(path)
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_peers_key_is_derived_from_its_public_key_and_this_hosts_private_one() {
    use mgrp_core::pair::{PrivateKey, pair_key};
    let (a, b, c) = (
        PrivateKey::from_bytes([1; 32]),
        PrivateKey::from_bytes([2; 32]),
        PrivateKey::from_bytes([3; 32]),
    );
    let (a_file, a_next_file) = (
        PrivateFile::new("a", &a.to_hex()),
        PrivateFile::new("a-next", &c.to_hex()),
    );
    let peer = |extra: &str| {
        format!(
            "private-key-file = \"{}\"\n{extra}\n[[peers]]\nprefix = \"10.0.0.2/32\"\npublic-key = \"{}\"\n",
            a_file.0.display(),
            b.public()
        )
    };
    let ip: IpAddr = "10.0.0.2".parse().unwrap();
    // The key in force with the peer, and the one more it opens with.
    let key_of = |text: &str| {
        Config::from_toml(text)
            .unwrap()
            .peering()
            .keys
            .key_for(ip)
            .unwrap()
            .clone()
    };
    // A's key with B is B's key with A, and no file holds it.
    let cfg = Config::from_toml(&peer("")).unwrap();
    let peering = cfg.peering();
    let k = peering.keys.key_for(ip).unwrap();
    assert_eq!(k.key, pair_key(&b, &a.public()).unwrap());
    assert!(k.next.is_none());
    let summary = cfg.summary();
    assert!(summary.contains("derived from its public key"), "{summary}");
    assert!(!summary.contains(&k.key.to_hex()), "{summary}");
    // A rotates to the pair of C's private key: B's packets sealed for A's next
    // public key open too, and A still seals with the key in force.
    let next = format!("next-private-key-file = \"{}\"", a_next_file.0.display());
    let k = key_of(&peer(&next));
    assert_eq!(k.key, pair_key(&a, &b.public()).unwrap());
    assert_eq!(k.next, Some(pair_key(&b, &c.public()).unwrap()));
    // B rotates: its next public key gives the next key.
    let text = format!("{}next-public-key = \"{}\"\n", peer(""), c.public());
    let k = key_of(&text);
    assert_eq!(k.next, Some(pair_key(&a, &c.public()).unwrap()));
    // A peer moves from a shared key file to its pair as a rotation: the file seals
    // while the pair's key opens, then the pair's key seals while the file opens.
    let shared = PrivateFile::new("shared", &"5a".repeat(32));
    let file_key: mgrp_core::auth::Key = "5a".repeat(32).parse().unwrap();
    let moving = |sealing: &str, next: &str| {
        format!(
            "private-key-file = \"{}\"\n[[peers]]\nprefix = \"10.0.0.2/32\"\n{sealing}\n{next}\n",
            a_file.0.display()
        )
    };
    let (file, pair) = (
        format!("key-file = \"{}\"", shared.0.display()),
        format!("public-key = \"{}\"", b.public()),
    );
    let (next_file, next_pair) = (
        format!("next-key-file = \"{}\"", shared.0.display()),
        format!("next-public-key = \"{}\"", b.public()),
    );
    let k = key_of(&moving(&file, &next_pair));
    assert_eq!(
        (k.key, k.next),
        (file_key.clone(), Some(pair_key(&a, &b.public()).unwrap()))
    );
    let k = key_of(&moving(&pair, &next_file));
    assert_eq!(
        (k.key, k.next),
        (pair_key(&a, &b.public()).unwrap(), Some(file_key))
    );
    // What cannot work is refused, saying why.
    for (text, says) in [
        (
            format!("{}next-public-key = \"{}\"\n", peer(&next), c.public()),
            "one end of a pair rotates at a time",
        ),
        (
            format!("{}key-file = \"{}\"\n", peer(""), a_file.0.display()),
            "key-file and public-key both",
        ),
        (
            format!(
                "[[peers]]\nprefix = \"10.0.0.2/32\"\npublic-key = \"{}\"\n",
                b.public()
            ),
            "give private-key-file",
        ),
        (
            format!(
                "private-key-file = \"{}\"\n[[peers]]\nprefix = \"10.0.0.2/32\"\npublic-key = \"{}\"\n",
                a_file.0.display(),
                a.public()
            ),
            "this host's own",
        ),
        (
            "[[peers]]\nprefix = \"10.0.0.2/32\"\npublic-key = \"12ab\"\n".to_string(),
            "64 hex digits",
        ),
        (
            format!(
                "[[peers]]\nprefix = \"10.0.0.2/32\"\nnext-public-key = \"{}\"\n",
                b.public()
            ),
            "give key-file or public-key too",
        ),
        (
            format!("next-private-key-file = \"{}\"\n", a_next_file.0.display()),
            "give private-key-file too",
        ),
    ] {
        let e = Config::from_toml(&text).unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
}

/// The example description (docs/mesh/example.toml) gives each member's mgrpd what
/// the per-node file derived from it (docs/mesh/derived/NAME.mgrpd.toml) gives.
#[test]
fn the_example_mesh_gives_what_its_derived_per_node_files_say() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/mesh");
    let key = PrivateFile::new(
        "example",
        &mgrp_core::pair::PrivateKey::from_bytes([9; 32]).to_hex(),
    );
    let base = format!("private-key-file = \"{}\"\n", key.0.display());
    for node in ["nyc1", "lon1", "fra1", "edge7"] {
        let from_mesh = Config::from_toml(&format!(
            "{base}mesh = \"{}\"\nnode = \"{node}\"\n",
            docs.join("example.toml").display()
        ))
        .unwrap();
        let derived =
            std::fs::read_to_string(docs.join(format!("derived/{node}.mgrpd.toml"))).unwrap();
        let from_file = Config::from_toml(&format!("{base}{derived}")).unwrap();
        assert!(!from_file.peering().routes.is_empty(), "{node}");
        assert_eq!(from_mesh.summary(), from_file.summary(), "{node}");
        // What the summary leaves out: the keys, named by whom they are shared with.
        for r in &from_file.peering().routes {
            let peer = r.addr();
            assert_eq!(
                from_mesh.peering().keys.key_for(peer).map(|k| &k.key),
                from_file.peering().keys.key_for(peer).map(|k| &k.key),
                "{node}: the key with {peer}"
            );
            assert!(
                from_mesh.peering().keys.key_for(peer).is_some(),
                "{node}: {peer}"
            );
        }
    }
}

#[test]
fn a_mesh_description_gives_the_peers_their_keys_and_the_routes() {
    use mgrp_core::pair::{PrivateKey, pair_key};
    let keys: Vec<PrivateKey> = (1..=3).map(|b| PrivateKey::from_bytes([b; 32])).collect();
    let mut mesh = String::new();
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        mesh.push_str(&format!(
            "[[member]]\nname = \"{name}\"\naddress = \"10.0.0.{}\"\npublic-key = \"{}\"\n",
            i + 1,
            keys[i].public()
        ));
    }
    mesh.push_str(
        "[[group]]\nname = \"all\"\nkind = \"full-mesh\"\nmembers = [\"a\", \"b\", \"c\"]\nmethods = [\"pathchirp\"]\n",
    );
    let mesh_file = PrivateFile::new("mesh", &mesh);
    let a_file = PrivateFile::new("mesh-a", &keys[0].to_hex());
    let config = |node: &str, extra: &str| {
        Config::from_toml(&format!(
            "mesh = \"{}\"\nnode = \"{node}\"\nprivate-key-file = \"{}\"\n{extra}",
            mesh_file.0.display(),
            a_file.0.display()
        ))
    };
    let c = config("a", "").unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let net = |s: &str| s.parse::<IpNet>().unwrap();
    assert_eq!(c.peering().routes, [net("10.0.0.2/32"), net("10.0.0.3/32")]);
    for (i, peer) in [(1, "10.0.0.2"), (2, "10.0.0.3")] {
        let peering = c.peering();
        let k = peering.keys.key_for(ip(peer)).unwrap();
        assert_eq!(k.key, pair_key(&keys[i], &keys[0].public()).unwrap());
        assert_eq!(
            c.peering().peer_name(Prefix::host(ip(peer))),
            Some(["b", "c"][i - 1])
        );
    }
    // The file's own table for a member's address stays as it is.
    let own = format!(
        "[[peers]]\nprefix = \"10.0.0.2/32\"\nname = \"b-by-hand\"\npublic-key = \"{}\"\nencap = \"udp\"\n",
        keys[1].public()
    );
    let c = config("a", &own).unwrap();
    assert_eq!(
        c.peering().peer_name(Prefix::host(ip("10.0.0.2"))),
        Some("b-by-hand")
    );
    assert_eq!(
        c.peering().peer_name(Prefix::host(ip("10.0.0.3"))),
        Some("c")
    );
    // What is wrong is said with the file, and the line where the description has it.
    let e = config("z", "").unwrap_err().to_string();
    assert!(
        e.contains("no member is named \"z\" (its members: a, b, c)"),
        "{e}"
    );
    let e = Config::from_toml(&format!("mesh = \"{}\"", mesh_file.0.display()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("mesh needs node"), "{e}");
    let e = Config::from_toml("node = \"a\"").unwrap_err().to_string();
    assert!(e.contains("give mesh too"), "{e}");
    let broken = PrivateFile::new("mesh-broken", &mesh.replace("\"c\"]", "\"d\"]"));
    let e = Config::from_toml(&format!("mesh = \"{}\"\nnode = \"a\"", broken.0.display()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&broken.0.display().to_string())
            && e.contains("line 16, group.members: \"d\" is no member"),
        "{e}"
    );
}

#[test]
fn a_reload_changes_peers_and_routes_and_names_what_waits_for_a_restart() {
    // A route's peer with a table of its own: one peer, removed once.
    let old = Config::from_toml(
        "routes = [\"10.0.0.2/32\"]\nmtu = 1400\n[[peers]]\nprefix = \"10.0.0.2/32\"\n",
    )
    .unwrap();
    let new = Config::from_toml(
        "routes = [\"10.0.0.3/32\"]\nmtu = 1300\n[[peers]]\nprefix = \"10.1.0.0/24\"\nname = \"lab\"\n",
    )
    .unwrap();
    let plan = reload::plan(&old, &new).unwrap();
    let p = |s: &str| s.parse::<Prefix>().unwrap();
    let n = |s: &str| s.parse::<IpNet>().unwrap();
    assert_eq!(plan.added_peers, [p("10.0.0.3/32"), p("10.1.0.0/24")]);
    assert_eq!(plan.removed_peers, [p("10.0.0.2/32")]);
    assert_eq!(plan.added_routes, [n("10.0.0.3/32")]);
    assert_eq!(plan.removed_routes, [n("10.0.0.2/32")]);
    assert_eq!(plan.need_restart, ["mtu"]);
    assert_eq!(plan.peering.peer_name(p("10.1.0.0/24")), Some("lab"));
    let line = plan.describe();
    assert!(line.contains("kept until a restart: mtu"), "{line}");
    // Put in force, every clone sees it, and the settings outside it stay.
    let clone = old.clone();
    old.set_peering(plan.peering);
    assert!(clone.peering().peers.is_peer("10.1.0.9".parse().unwrap()));
    assert!(!clone.peering().peers.is_peer("10.0.0.2".parse().unwrap()));
    assert_eq!(clone.mtu, 1400);
    // The same file again changes nothing in force.
    let again = reload::plan(&old, &new).unwrap();
    assert!(again.is_empty(), "{}", again.describe());
    // A kept peer's key changed is a change, though no peer comes or goes.
    let (a, b) = (keyed_with(raw_peer(), "5a"), keyed_with(raw_peer(), "5b"));
    let (a, b) = (a.unwrap(), b.unwrap());
    let change = reload::plan(&a, &b).unwrap();
    assert!(change.added_peers.is_empty() && !change.is_empty());
    assert!(
        reload::plan(&a, &keyed_with(raw_peer(), "5a").unwrap())
            .unwrap()
            .is_empty()
    );
}

fn raw_peer() -> &'static str {
    "routes = [\"10.0.0.2/32\"]\n"
}

#[test]
fn a_mesh_is_a_file_or_an_https_url_read_again_on_its_period() {
    let mesh = PrivateFile::new(
        "mesh-refresh",
        "[[member]]\nname = \"a\"\naddress = \"10.0.0.1\"\n[[member]]\nname = \"b\"\naddress = \"10.0.0.2\"\n\
         [[group]]\nname = \"all\"\nkind = \"full-mesh\"\nmembers = [\"a\", \"b\"]\nmethods = [\"pathchirp\"]\n",
    );
    let path = mesh.0.display();
    let c = Config::from_toml(&format!(
        "mesh = \"{path}\"\nnode = \"a\"\nmesh-refresh = \"5m\"\n"
    ))
    .unwrap();
    assert_eq!(c.mesh_refresh, Some(Duration::from_secs(300)));
    for (text, wanted) in [
        (
            "mesh-refresh = \"5m\"\n".to_string(),
            "mesh-refresh: give mesh too",
        ),
        (
            format!("mesh = \"{path}\"\nnode = \"a\"\nmesh-refresh = \"10ms\"\n"),
            "use at least 1s",
        ),
        (
            "mesh-ca-file = \"ca.pem\"\n".to_string(),
            "for a mesh fetched over https://: give mesh too",
        ),
        (
            format!("mesh = \"{path}\"\nnode = \"a\"\nmesh-token-file = \"t\"\n"),
            "are for a mesh fetched over https://",
        ),
        (
            "mesh = \"http://192.0.2.1/mesh.toml\"\nnode = \"a\"\n".to_string(),
            "over https://",
        ),
        (
            "mesh = \"https://192.0.2.1/mesh.toml\"\nnode = \"a\"\n".to_string(),
            "give mesh-ca-file",
        ),
    ] {
        let e = Config::from_toml(&text).unwrap_err().to_string();
        assert!(e.contains(wanted), "{text}: {e}");
    }
}

#[test]
fn a_reload_refuses_what_only_a_restart_can_change() {
    let raw = "routes = [\"10.0.0.2/32\"]\n";
    let refused =
        |old: &Config, new: &str| reload::plan(old, &Config::from_toml(new).unwrap()).unwrap_err();
    let old = Config::from_toml(raw).unwrap();
    // UDP without the socket opened at start.
    let e = refused(
        &old,
        "routes = [\"10.0.0.2/32\", \"10.0.0.3/32\"]\n[[peers]]\nprefix = \"10.0.0.3/32\"\nencap = \"udp\"\n",
    );
    assert!(e.contains("no UDP socket"), "{e}");
    // A kept peer's encapsulation or wire.
    let e = refused(
        &old,
        "routes = [\"10.0.0.2/32\"]\n[[peers]]\nprefix = \"10.0.0.2/32\"\nwire = 1\n",
    );
    assert!(
        e.contains("peer 10.0.0.2/32 changes its encap or wire"),
        "{e}"
    );
    // A next-hop device.
    let udp = "encap = \"udp\"\nroutes = [\"10.0.0.2/32\"]\n";
    let old_udp = Config::from_toml(udp).unwrap();
    let e = refused(
        &old_udp,
        &format!("{udp}[[peers]]\nprefix = \"10.0.0.2/32\"\ndevice = \"mgrp-n\"\n"),
    );
    assert!(e.contains("next-hop devices"), "{e}");
    // Another UDP port.
    let e = refused(
        &old_udp,
        "encap = \"udp:5000\"\nroutes = [\"10.0.0.2/32\"]\n",
    );
    assert!(e.contains("UDP port changed (4253 to 5000)"), "{e}");
    // IPv6 routes without the IPv6 rule.
    let e = refused(&old, "routes = [\"10.0.0.2/32\", \"fd00::2/128\"]\n");
    assert!(e.contains("IPv6 policy rule"), "{e}");
    // Keys turned on, or off.
    let with_keys = keyed(raw).unwrap();
    let e = reload::plan(&old, &with_keys).unwrap_err();
    assert!(e.contains("keys cannot be turned on or off"), "{e}");
    let e = reload::plan(&with_keys, &old).unwrap_err();
    assert!(e.contains("keys cannot be turned on or off"), "{e}");
    // A keyed host whose last peer leaves turns nothing off, and one may come back.
    let alone = Config::from_toml("").unwrap();
    let plan = reload::plan(&with_keys, &alone).unwrap();
    assert_eq!(plan.removed_peers.len(), 1);
    assert!(reload::plan(&with_keys, &keyed(raw).unwrap()).is_ok());
}
