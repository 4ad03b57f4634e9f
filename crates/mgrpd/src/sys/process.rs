//! The process: capabilities, the switch to another user, and interface sysctls
//! (its threads' scheduling is `mgrp_rt::thread`'s).

use std::io;

use nix::sys::prctl;
use nix::unistd::{self};

use super::check;

pub use mgrp_rt::caps::{cap, cap_bit, effective_capabilities};

/// Header of capget/capset (linux/capability.h, version 3: two 32-bit words).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// One 32-bit word of the three capability sets.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// Keeps only the capabilities in `keep` (a mask of [`cap_bit`]s) in the calling
/// thread's effective and permitted sets, for good: nothing is inheritable or
/// ambient afterwards. Capabilities belong to threads, so each thread limits its
/// own, and threads it starts later inherit what is left.
pub fn limit_capabilities(keep: u64) -> io::Result<()> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut now = [CapData::default(); 2];
    // SAFETY: header and two data words as the version-3 ABI requires.
    check(unsafe {
        libc::syscall(libc::SYS_capget, &raw mut header, now.as_mut_ptr()) as libc::c_int
    })?;
    let had = u64::from(now[0].permitted) | (u64::from(now[1].permitted) << 32);
    let keep = keep & had;
    let data = [
        CapData {
            effective: keep as u32,
            permitted: keep as u32,
            inheritable: 0,
        },
        CapData {
            effective: (keep >> 32) as u32,
            permitted: (keep >> 32) as u32,
            inheritable: 0,
        },
    ];
    // SAFETY: as above; capset only reads both.
    check(unsafe {
        libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) as libc::c_int
    })?;
    let zero: libc::c_ulong = 0;
    // SAFETY: integer arguments only. Fails on kernels without ambient sets, which
    // then have nothing to clear.
    let _ = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            zero,
            zero,
            zero,
        )
    };
    Ok(())
}

/// User and group ids of the user called `name`.
pub fn user_ids(name: &str) -> Option<(u32, u32)> {
    let user = unistd::User::from_name(name).ok()??;
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

/// Gives `path` to user `uid` and group `gid`.
pub fn give_to(path: &std::path::Path, uid: u32, gid: u32) -> io::Result<()> {
    unistd::chown(
        path,
        Some(unistd::Uid::from_raw(uid)),
        Some(unistd::Gid::from_raw(gid)),
    )
    .map_err(io::Error::from)
}

/// Becomes user `uid` with group `gid` and no supplementary groups, keeping the
/// capabilities in `keep`. Call it before starting threads: the ids change for the
/// whole process, the capabilities only for the calling thread.
pub fn switch_user(uid: u32, gid: u32, keep: u64) -> io::Result<()> {
    // Keeps the permitted set across setuid.
    prctl::set_keepcaps(true)?;
    unistd::setgroups(&[])?;
    let gid = unistd::Gid::from_raw(gid);
    unistd::setresgid(gid, gid, gid)?;
    let uid = unistd::Uid::from_raw(uid);
    unistd::setresuid(uid, uid, uid)?;
    prctl::set_keepcaps(false)?;
    // The change of user emptied the effective set; take back what is kept.
    limit_capabilities(keep)
}

/// Forbids this process and its children ever gaining privileges through exec.
pub fn no_new_privileges() -> io::Result<()> {
    prctl::set_no_new_privs()?;
    Ok(())
}

/// The id of the group called `name`.
pub fn group_id(name: &str) -> Option<u32> {
    Some(unistd::Group::from_name(name).ok()??.gid.as_raw())
}

/// Sets a /proc/sys knob of an interface, e.g. `("ipv4", "mgrp0", "rp_filter", "2")`.
pub fn set_if_sysctl(family: &str, ifname: &str, key: &str, value: &str) -> io::Result<()> {
    std::fs::write(format!("/proc/sys/net/{family}/conf/{ifname}/{key}"), value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_groups_by_name() {
        assert_eq!(user_ids("root"), Some((0, 0)));
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(user_ids("no-such-user-mgrp"), None);
        assert_eq!(group_id("no-such-group-mgrp"), None);
    }
}
