//! Criterion benches of mgrp-core's per-packet code paths. The goal is that every
//! per-packet operation stays well under 1 µs, so protocol logic never limits the
//! daemon. Run with `cargo bench -p mgrp-core --bench core`.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use mgrp_core::planner::{Packing, Path, Planner, Policy, ProbeSpec, Transaction};
use mgrp_core::reassembly::{ChunkOutcome, Limits, Reassembler};
use mgrp_core::wire::{Chunk, Header, Kind, Packet, Repr, Version};
use mgrp_core::{MonoTime, WallTime};

const PROBE_LEN: usize = 1000 - 20;

fn header() -> Header {
    Header {
        kind: Kind::Probe,
        last_in_train: false,
        src_port: 5000,
        dst_port: 5001,
        transaction: 42,
        seq: 3,
        train_len: 100,
        sender_time: WallTime::from_nanos(1_700_000_000_000_000_000),
    }
}

fn wire(c: &mut Criterion) {
    let tool = [0x11u8; 16];
    let one = vec![0x45u8; 900];
    let several: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8; 100]).collect();
    let cases: [(&str, Vec<Chunk<'_>>); 2] = [
        (
            "one_rider",
            vec![Chunk {
                rider_id: 1,
                offset: 0,
                rider_len: 900,
                data: &one,
            }],
        ),
        (
            "eight_riders",
            several
                .iter()
                .enumerate()
                .map(|(i, d)| Chunk {
                    rider_id: i as u32,
                    offset: 0,
                    rider_len: 100,
                    data: d,
                })
                .collect(),
        ),
    ];
    let mut g = c.benchmark_group("wire_1000B_probe");
    for (version, (name, chunks)) in [Version::V1, Version::V2]
        .into_iter()
        .flat_map(|v| cases.iter().map(move |c| (v, c)))
    {
        let name = format!("v{}/{name}", version.number());
        let repr = Repr {
            version,
            header: header(),
            tool_header: &tool,
            chunks: chunks.clone(),
            trailer_len: 0,
        };
        let mut buf = vec![0u8; PROBE_LEN];
        g.bench_function(format!("emit/{name}"), |b| {
            b.iter(|| black_box(&repr).emit(black_box(&mut buf)).unwrap());
        });
        repr.emit(&mut buf).unwrap();
        g.bench_function(format!("parse_view/{name}"), |b| {
            b.iter(|| {
                let p = Packet::new_checked(black_box(&buf[..])).unwrap();
                let mut n = 0;
                for ch in p.chunks() {
                    n += ch.data.len();
                }
                black_box((p.tool_header().len(), n))
            });
        });
        g.bench_function(format!("parse_repr/{name}"), |b| {
            b.iter(|| {
                let p = Packet::new_checked(black_box(&buf[..])).unwrap();
                black_box(Repr::parse(&p).chunks.len())
            });
        });
    }
    g.finish();
}

fn train(n: usize) -> Transaction {
    Transaction {
        id: 1,
        src_port: 5000,
        dst_port: 5001,
        probes: (0..n)
            .map(|_| ProbeSpec {
                header: Bytes::from_static(&[0x22; 16]),
                size: 1000,
                gap: Duration::from_micros(100),
                piggyback: true,
            })
            .collect(),
    }
}

fn loaded_planner(packing: Packing) -> Planner {
    let policy = Policy {
        packing,
        hold: Duration::from_secs(1),
        ..Policy::default()
    };
    let mut p = Planner::new(policy, Path::ipv4(1500)).unwrap();
    // A mix of full-size segments, ACK-sized and mid-sized packets.
    let sizes = [1400usize, 52, 600, 1400, 120];
    for i in 0..1000 {
        p.handle_rider(
            MonoTime::ZERO,
            Bytes::from(vec![i as u8; sizes[i % sizes.len()]]),
        )
        .unwrap();
    }
    p.handle_transaction(MonoTime::ZERO, train(100)).unwrap();
    p
}

fn planner(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan_100_probe_train_1000_riders");
    g.throughput(Throughput::Elements(100));
    for (name, packing) in [
        ("one_per_probe", Packing::OnePerProbe),
        ("multiple", Packing::Multiple),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || loaded_planner(packing),
                |mut p| {
                    let now = MonoTime::from_nanos(1);
                    while let Some(probe) = p.poll_probe(now) {
                        p.handle_probe_sent(
                            probe.transaction,
                            probe.seq,
                            Some((probe.deadline, WallTime::from_nanos(1))),
                        );
                        black_box(&probe.packet);
                    }
                    black_box(p.poll_report())
                },
                BatchSize::LargeInput,
            );
        });
    }
    g.finish();

    let mut g = c.benchmark_group("rider_in_out");
    g.bench_function("handle_rider_then_release_unchanged", |b| {
        let policy = Policy {
            hold: Duration::ZERO,
            ..Policy::default()
        };
        let mut p = Planner::new(policy, Path::ipv4(1500)).unwrap();
        let rider = Bytes::from(vec![0u8; 1400]);
        b.iter(|| {
            p.handle_rider(MonoTime::ZERO, rider.clone()).unwrap();
            black_box(p.poll_transmit(MonoTime::ZERO))
        });
    });
    g.finish();
}

fn reassembly(c: &mut Criterion) {
    let rider: Vec<u8> = (0..1500u32).map(|i| i as u8).collect();
    let mut g = c.benchmark_group("reassembly");
    g.throughput(Throughput::Elements(1));
    g.bench_function("1500B_rider_in_3_chunks", |b| {
        let mut r = Reassembler::new(Limits::default());
        let mut id = 0u32;
        b.iter(|| {
            id = id.wrapping_add(1);
            let mut out = None;
            for (offset, range) in [(0u16, 0..500), (500, 500..1000), (1000, 1000..1500)] {
                let chunk = Chunk {
                    rider_id: id,
                    offset,
                    rider_len: 1500,
                    data: &rider[range],
                };
                if let ChunkOutcome::Complete(v) = r.handle_chunk(MonoTime::ZERO, 7u32, &chunk) {
                    out = Some(v);
                }
            }
            black_box(out.expect("complete"))
        });
    });
    g.bench_function("whole_1500B_rider", |b| {
        let mut r = Reassembler::new(Limits::default());
        let mut id = 0u32;
        b.iter(|| {
            id = id.wrapping_add(1);
            let chunk = Chunk {
                rider_id: id,
                offset: 0,
                rider_len: 1500,
                data: &rider,
            };
            black_box(r.handle_chunk(MonoTime::ZERO, 7u32, &chunk))
        });
    });
    g.finish();
}

/// The cost the keyed tag adds to every MGRP packet, for the sizes pathload and the
/// paper's trains use: sealing happens on the pacer's path right before each send.
/// Version 3 (the default) and 2 bind the direction (48 bytes more hashed); version
/// 1, the tag of daemons before directions, bound nothing.
fn auth(c: &mut Criterion) {
    use mgrp_core::auth::{Binding, Direction, Key, ReplayWindow, TRAILER_LEN, open, seal};
    let key = Key::from_bytes([7; 32]);
    let d = Direction {
        from: "10.0.0.1".parse().unwrap(),
        to: "10.0.0.2".parse().unwrap(),
    };
    let mut g = c.benchmark_group("auth");
    for size in [228usize, 1000, 1500] {
        let len = size - 20;
        let repr = Repr {
            version: Version::V1,
            header: header(),
            tool_header: &[0; 24],
            chunks: Vec::new(),
            trailer_len: TRAILER_LEN,
        };
        let mut buf = repr.emit_into(vec![0u8; len]).unwrap();
        g.throughput(Throughput::Bytes(len as u64));
        for (name, binding) in [
            ("", Binding::Indexed(d)),
            (" (version 2)", Binding::To(d)),
            (" (version 1)", Binding::None),
        ] {
            let mut counter = 0u64;
            g.bench_function(format!("seal {size}-byte probe{name}"), |b| {
                b.iter(|| {
                    counter += 1;
                    seal(&key, binding, black_box(&mut buf), counter).unwrap();
                });
            });
            g.bench_function(format!("open {size}-byte probe{name}"), |b| {
                b.iter(|| open(&key, binding, black_box(&buf)).unwrap());
            });
        }
    }
    let mut w = ReplayWindow::default();
    let mut n = 0u64;
    g.bench_function("replay window, in order", |b| {
        b.iter(|| {
            n += 1;
            black_box(w.check_and_update(n))
        });
    });
    g.finish();
}

criterion_group!(benches, wire, planner, reassembly, auth);
criterion_main!(benches);
