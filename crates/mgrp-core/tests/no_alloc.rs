//! The probe path of the endpoint allocates nothing once a train is under way: the
//! pacer calls it on a real-time thread, where a trip into the allocator is a source
//! of latency. Checked with a counting allocator, per thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use mgrp_core::endpoint::{Endpoint, EndpointConfig};
use mgrp_core::planner::{Packing, Policy, ProbeSpec, Transaction};
use mgrp_core::{MonoTime, WallTime};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

fn us(n: u64) -> MonoTime {
    MonoTime::from_nanos(n * 1000)
}

#[test]
fn building_and_sending_probes_allocates_nothing() {
    for packing in [Packing::OnePerProbe, Packing::Multiple] {
        let policy = Policy {
            packing,
            hold: Duration::from_secs(10),
            ..Policy::default()
        };
        let mut e = Endpoint::new(EndpointConfig::new(policy, 1500)).unwrap();
        let peer: IpAddr = "192.0.2.7".parse().unwrap();
        // Plenty of riders, so every probe carries some.
        for i in 0..2000u32 {
            let mut rider = vec![0u8; 300 + (i as usize % 700)];
            rider[0] = 0x45;
            // As the TUN reader makes them: a clone is a count, never an allocation.
            e.handle_rider(us(0), peer, Bytes::from_owner(rider))
                .unwrap();
        }
        let probes = 200;
        let tx = Transaction {
            id: 0,
            src_port: 1,
            dst_port: 2,
            probes: (0..probes)
                .map(|i| ProbeSpec {
                    header: Bytes::from_static(b"tool"),
                    size: 1500,
                    gap: Duration::from_micros(if i == 0 { 0 } else { 100 }),
                    piggyback: true,
                })
                .collect(),
        };
        e.handle_submit(us(1), 1, peer, tx).unwrap();
        let mut now = us(2);
        let send = |e: &mut Endpoint, now: &mut MonoTime| {
            let deadline = e.poll_probe_deadline(*now).expect("a train in flight");
            *now = deadline;
            let (peer, probe) = e.poll_probe(*now).expect("a probe");
            assert!(probe.rider_chunks > 0, "{packing:?}: riders wait");
            e.handle_probe_sent(
                *now,
                probe.transaction,
                probe.seq,
                Some((*now, WallTime::from_nanos(1))),
            );
            e.recycle(peer, probe);
        };
        // The first probes fill the spare buffers.
        for _ in 0..5 {
            send(&mut e, &mut now);
        }
        let n = allocations(|| {
            for _ in 5..probes - 1 {
                send(&mut e, &mut now);
            }
        });
        assert_eq!(
            n,
            0,
            "{packing:?}: {n} allocations in {} probes",
            probes - 6
        );
    }
}
