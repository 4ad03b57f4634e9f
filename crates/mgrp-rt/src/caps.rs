//! Which capabilities the process holds: the daemons check theirs at start and say
//! what a missing one turns off.

use std::io;

/// Capability numbers (linux/capability.h).
pub mod cap {
    /// Interfaces, routes, rules, sysctls of the network namespace.
    pub const NET_ADMIN: u32 = 12;
    /// Raw and packet sockets.
    pub const NET_RAW: u32 = 13;
    /// Locking memory beyond RLIMIT_MEMLOCK.
    pub const IPC_LOCK: u32 = 14;
    /// Real-time scheduling.
    pub const SYS_NICE: u32 = 23;
}

/// The bit of capability `cap` in a mask.
pub const fn cap_bit(cap: u32) -> u64 {
    1 << cap
}

/// The calling thread's effective capability set, from `/proc/thread-self/status`
/// (capabilities belong to threads).
pub fn effective_capabilities() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"))?;
    parse_cap_eff(&status).ok_or_else(|| io::Error::other("no CapEff line in /proc/self/status"))
}

/// The `CapEff:` mask of a `/proc/*/status` text.
fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_mask_is_read_from_its_line() {
        let s = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t00000000a80425fb\nCapEff:\t0000000000003000\n";
        let m = parse_cap_eff(s).unwrap();
        assert_eq!(m, cap_bit(cap::NET_ADMIN) | cap_bit(cap::NET_RAW));
        assert_eq!(parse_cap_eff("Name:\tx\n"), None);
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
    }

    #[test]
    fn this_process_has_a_mask() {
        effective_capabilities().unwrap();
    }
}
