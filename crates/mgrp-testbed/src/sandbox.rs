//! A systemd unit's sandbox applied by hand, for tests on hosts where systemd is not
//! PID 1 (this machine, CI): the unit's (and its drop-ins') capability bounding and
//! ambient sets and `NoNewPrivileges` by setpriv, with a user and groups the test
//! chooses (`User=`, `DynamicUser=`, `SupplementaryGroups=` name accounts that exist
//! only where the package was installed), and its `RestrictAddressFamilies` allow
//! list by a seccomp filter on `socket(2)` that this module installs before it execs
//! the program, as systemd does (`EAFNOSUPPORT` for any other family).
//!
//! Not applied: the file-system and namespace settings (`ProtectSystem`,
//! `PrivateTmp`, `RestrictNamespaces`…), `SystemCallFilter` and
//! `MemoryDenyWriteExecute`. `systemd-analyze verify` and `security --offline`
//! (scripts/install-check) read those; for `SystemCallFilter`, tests trace a program
//! with strace and check its calls against the unit's list
//! ([`system_calls_after_exec`], [`allowed_system_calls`]).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};

/// The role name under which a test binary restricts address families and execs
/// ([`restrict_and_exec`]).
pub const ROLE: &str = "restrict-families";

/// What a unit and its drop-ins grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sandbox {
    /// `CapabilityBoundingSet=`, merged (setpriv's names: `net_admin`).
    pub bounding: Vec<String>,
    /// `AmbientCapabilities=`, merged.
    pub ambient: Vec<String>,
    /// `RestrictAddressFamilies=` (an allow list), merged; empty: not restricted.
    pub families: Vec<String>,
    /// `NoNewPrivileges=yes`.
    pub no_new_privileges: bool,
}

impl Sandbox {
    /// The sandbox of `unit` with `drop_ins` applied in order (systemd merges these
    /// lists across files; an empty assignment resets one).
    pub fn from_unit(unit: &str, drop_ins: &[&str]) -> anyhow::Result<Self> {
        let mut s = Self::default();
        for text in std::iter::once(unit).chain(drop_ins.iter().copied()) {
            let mut in_service = false;
            for line in text.lines().map(str::trim) {
                if line.starts_with('[') {
                    in_service = line == "[Service]";
                    continue;
                }
                if !in_service || line.starts_with('#') {
                    continue;
                }
                let Some((key, value)) = line.split_once('=') else {
                    continue;
                };
                let list = || -> Vec<String> {
                    value
                        .split_whitespace()
                        .map(|c| c.trim_start_matches("CAP_").to_lowercase())
                        .collect()
                };
                let merge = |into: &mut Vec<String>, add: Vec<String>| {
                    if add.is_empty() {
                        into.clear();
                    }
                    for a in add {
                        if !into.contains(&a) {
                            into.push(a);
                        }
                    }
                };
                match key.trim() {
                    "CapabilityBoundingSet" => merge(&mut s.bounding, list()),
                    "AmbientCapabilities" => merge(&mut s.ambient, list()),
                    "RestrictAddressFamilies" => {
                        if value.trim_start().starts_with('~') {
                            bail!("a deny list of address families is not applied here: {line}");
                        }
                        let fams: Vec<String> =
                            value.split_whitespace().map(str::to_owned).collect();
                        for f in &fams {
                            family_number(f).with_context(|| format!("unknown family {f}"))?;
                        }
                        merge(&mut s.families, fams);
                    }
                    "NoNewPrivileges" => s.no_new_privileges = value.trim() == "yes",
                    _ => {}
                }
            }
        }
        Ok(s)
    }

    /// The command that runs `program args..` in this sandbox as user `uid`, group
    /// `gid` and supplementary `groups`: setpriv, then `helper` (a test binary that
    /// acts as [`ROLE`]) restricting the address families, then the program.
    pub fn command(
        &self,
        helper: &Path,
        uid: Option<u32>,
        gid: Option<u32>,
        groups: &[u32],
        program: &Path,
        args: &[String],
    ) -> (PathBuf, Vec<String>) {
        let caps = |l: &[String]| {
            std::iter::once("-all".to_owned())
                .chain(l.iter().map(|c| format!("+{c}")))
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut a = Vec::new();
        if let Some(uid) = uid {
            a.push(format!("--reuid={uid}"));
        }
        if let Some(gid) = gid {
            a.push(format!("--regid={gid}"));
        }
        if uid.is_some() || gid.is_some() || !groups.is_empty() {
            if groups.is_empty() {
                a.push("--clear-groups".into());
            } else {
                let g: Vec<String> = groups.iter().map(u32::to_string).collect();
                a.push(format!("--groups={}", g.join(",")));
            }
        }
        a.push(format!("--bounding-set={}", caps(&self.bounding)));
        a.push(format!("--inh-caps={}", caps(&self.ambient)));
        a.push(format!("--ambient-caps={}", caps(&self.ambient)));
        if self.no_new_privileges {
            a.push("--no-new-privs".into());
        }
        a.push("--".into());
        if !self.families.is_empty() {
            a.push(helper.display().to_string());
            a.push(ROLE.into());
            a.push(self.families.join(","));
            a.push("--".into());
        }
        a.push(program.display().to_string());
        a.extend(args.iter().cloned());
        (PathBuf::from("/usr/bin/setpriv"), a)
    }
}

/// The words of a unit's `SystemCallFilter=` lines (an allow list: names and
/// `@groups`); an error if it has none or denies instead.
pub fn system_call_filter(unit: &str) -> anyhow::Result<Vec<String>> {
    let spec: Vec<String> = unit
        .lines()
        .filter_map(|l| l.trim().strip_prefix("SystemCallFilter="))
        .flat_map(|v| v.split_whitespace().map(str::to_owned))
        .collect();
    if spec.is_empty() {
        bail!("the unit has no SystemCallFilter");
    }
    if spec.iter().any(|w| w.starts_with('~')) {
        bail!("a deny list of system calls is not checked here: {spec:?}");
    }
    Ok(spec)
}

/// Every system call `spec` allows, its `@groups` expanded by `systemd-analyze
/// syscall-filter` (this host's systemd: its groups are what its units get).
pub fn allowed_system_calls(spec: &[String]) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let Some(analyze) = crate::packages::find("systemd-analyze") else {
        crate::packages::require(&["systemd-analyze"])?;
        bail!("systemd-analyze is not on the PATH");
    };
    let mut out = std::collections::BTreeSet::new();
    let mut todo: Vec<String> = spec.to_vec();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(word) = todo.pop() {
        if !word.starts_with('@') {
            out.insert(word);
            continue;
        }
        if !seen.insert(word.clone()) {
            continue;
        }
        let o = std::process::Command::new(&analyze)
            .args(["syscall-filter", &word])
            .output()
            .context("cannot run systemd-analyze")?;
        if !o.status.success() {
            bail!(
                "systemd-analyze syscall-filter {word}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let item = line.trim();
            if line.starts_with("    ") && !item.starts_with('#') && !item.is_empty() {
                todo.push(item.to_owned());
            }
        }
    }
    Ok(out)
}

/// The system calls named in an `strace -f` log after the first line that holds
/// `exec` (the start of an `execve` call: `execve("/path", ["/path", "role"`) and
/// succeeded: the program's own calls and those of what it runs.
pub fn system_calls_after_exec(
    log: &str,
    exec: &str,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let start = log
        .lines()
        .position(|l| l.contains(exec) && l.trim_end().ends_with("= 0"))
        .with_context(|| format!("no {exec} in the trace"))?;
    Ok(log
        .lines()
        .skip(start + 1)
        .filter_map(|l| {
            let rest = l
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            if let Some(r) = rest.strip_prefix("<... ") {
                return r.split_whitespace().next().map(str::to_owned);
            }
            let name = rest.split('(').next()?;
            (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                .then(|| name.to_owned())
        })
        .collect())
}

/// The number of address family `name` (`AF_INET`).
pub fn family_number(name: &str) -> Option<i32> {
    Some(match name {
        "AF_UNIX" => libc::AF_UNIX,
        "AF_INET" => libc::AF_INET,
        "AF_INET6" => libc::AF_INET6,
        "AF_NETLINK" => libc::AF_NETLINK,
        "AF_PACKET" => libc::AF_PACKET,
        _ => return None,
    })
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// The seccomp program that fails `socket(2)` with `EAFNOSUPPORT` for every address
/// family but `allowed` (and any system call of another architecture with `ENOSYS`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn families_filter(allowed: &[i32]) -> std::io::Result<Vec<libc::sock_filter>> {
    use libc::{
        BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W, SECCOMP_RET_ALLOW,
        SECCOMP_RET_ERRNO, sock_filter,
    };
    let stmt = |code: u32, k: u32| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |k: u32, jt: u8, jf: u8| sock_filter {
        code: (BPF_JMP | BPF_JEQ | BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let n = u8::try_from(allowed.len())
        .ok()
        .filter(|n| *n < 200)
        .ok_or_else(|| std::io::Error::other("too many families"))?;
    // seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low half on a
    // little-endian machine, which both architectures here are).
    let mut prog = vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, 4),
        jump(AUDIT_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        // Not socket(2): to the last instruction, which allows.
        jump(libc::SYS_socket as u32, 0, n + 2),
        stmt(BPF_LD | BPF_W | BPF_ABS, 16),
    ];
    for (i, f) in allowed.iter().enumerate() {
        // An allowed family: over the rest of the list and the refusal.
        prog.push(jump(*f as u32, n - i as u8, 0));
    }
    prog.push(stmt(
        BPF_RET | BPF_K,
        SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32,
    ));
    prog.push(stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    Ok(prog)
}

/// Installs `prog` ([`families_filter`]) for this thread and what it execs; sets
/// no-new-privileges first, as the kernel requires of a process without
/// CAP_SYS_ADMIN. Allocates nothing (safe in a forked child).
pub fn install_filter(prog: &mut [libc::sock_filter]) -> std::io::Result<()> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).map_err(|_| std::io::Error::other("program too long"))?,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: prctl with the documented arguments; the program outlives the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &raw const fprog,
                0,
                0,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The [`ROLE`]: `restrict-families AF_A,AF_B -- PROGRAM ARGS..` restricts this
/// process's address families to those and execs the program (which keeps them).
pub fn restrict_and_exec(args: &[OsString]) -> ExitCode {
    let fail = |m: String| {
        eprintln!("{ROLE}: {m}");
        ExitCode::FAILURE
    };
    let (Some(list), Some(sep)) = (args.get(1), args.get(2)) else {
        return fail("usage: restrict-families AF_X,AF_Y -- PROGRAM ARGS..".into());
    };
    if sep != "--" || args.len() < 4 {
        return fail("usage: restrict-families AF_X,AF_Y -- PROGRAM ARGS..".into());
    }
    let mut fams = Vec::new();
    for name in list.to_string_lossy().split(',') {
        match family_number(name) {
            Some(n) => fams.push(n),
            None => return fail(format!("unknown address family {name}")),
        }
    }
    if let Err(e) = families_filter(&fams).and_then(|mut p| install_filter(&mut p)) {
        return fail(format!("cannot install the seccomp filter: {e}"));
    }
    let argv: Vec<CString> = match args[3..]
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect()
    {
        Ok(v) => v,
        Err(e) => return fail(format!("bad argument: {e}")),
    };
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: a NUL-terminated argv of C strings that live until the call.
    unsafe { libc::execv(argv[0].as_ptr(), ptrs.as_ptr()) };
    fail(format!(
        "cannot run {}: {}",
        args[3].to_string_lossy(),
        std::io::Error::last_os_error()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_merge_across_drop_ins_and_an_empty_one_resets() {
        let unit = "[Unit]\nCapabilityBoundingSet=CAP_IGNORED\n[Service]\nCapabilityBoundingSet=CAP_SYS_NICE\nAmbientCapabilities=CAP_SYS_NICE\nNoNewPrivileges=yes\nRestrictAddressFamilies=AF_UNIX AF_INET\n";
        let drop = "[Service]\nCapabilityBoundingSet=CAP_NET_RAW\nAmbientCapabilities=CAP_NET_RAW\nRestrictAddressFamilies=AF_PACKET\n";
        let s = Sandbox::from_unit(unit, &[drop]).unwrap();
        assert_eq!(s.bounding, ["sys_nice", "net_raw"]);
        assert_eq!(s.ambient, ["sys_nice", "net_raw"]);
        assert_eq!(s.families, ["AF_UNIX", "AF_INET", "AF_PACKET"]);
        assert!(s.no_new_privileges);
        let reset = Sandbox::from_unit(unit, &["[Service]\nAmbientCapabilities=\n"]).unwrap();
        assert!(reset.ambient.is_empty());
        assert!(
            Sandbox::from_unit("[Service]\nRestrictAddressFamilies=~AF_PACKET\n", &[]).is_err()
        );
        assert!(Sandbox::from_unit("[Service]\nRestrictAddressFamilies=AF_BOGUS\n", &[]).is_err());
    }

    #[test]
    fn a_trace_is_read_from_the_programs_exec_on() {
        let log = "\
100 execve(\"/bin/setpriv\", [\"setpriv\"], 0x0) = 0
100 prctl(PR_SET_NO_NEW_PRIVS, 1) = 0
100 execve(\"/t/me\", [\"/t/me\", \"overlay\"], 0x0) = 0
100 openat(AT_FDCWD, \"x\", O_RDONLY) = 3
101 futex(0x1, FUTEX_WAIT <unfinished ...>
100 --- SIGHUP {si_signo=SIGHUP} ---
101 <... clock_nanosleep resumed>) = 0
100 +++ exited with 0 +++
";
        let calls =
            system_calls_after_exec(log, "execve(\"/t/me\", [\"/t/me\", \"overlay\"").unwrap();
        let want: std::collections::BTreeSet<String> = ["openat", "futex", "clock_nanosleep"]
            .map(str::to_owned)
            .into();
        assert_eq!(calls, want);
        assert!(system_calls_after_exec(log, "execve(\"/nope\"").is_err());
        assert_eq!(
            system_call_filter("[Service]\nSystemCallFilter=@system-service adjtimex\n").unwrap(),
            ["@system-service", "adjtimex"]
        );
        assert!(system_call_filter("[Service]\nSystemCallFilter=~@clock\n").is_err());
        assert!(system_call_filter("[Service]\n").is_err());
    }

    #[test]
    fn the_command_runs_setpriv_then_the_filter_then_the_program() {
        let s = Sandbox {
            bounding: vec!["net_raw".into()],
            ambient: vec!["net_raw".into()],
            families: vec!["AF_UNIX".into(), "AF_PACKET".into()],
            no_new_privileges: true,
        };
        let (prog, args) = s.command(
            Path::new("/t/helper"),
            Some(65534),
            Some(65534),
            &[65534],
            Path::new("/t/prog"),
            &["--flag".into()],
        );
        assert_eq!(prog, Path::new("/usr/bin/setpriv"));
        assert_eq!(
            args,
            [
                "--reuid=65534",
                "--regid=65534",
                "--groups=65534",
                "--bounding-set=-all,+net_raw",
                "--inh-caps=-all,+net_raw",
                "--ambient-caps=-all,+net_raw",
                "--no-new-privs",
                "--",
                "/t/helper",
                ROLE,
                "AF_UNIX,AF_PACKET",
                "--",
                "/t/prog",
                "--flag"
            ]
        );
    }

    /// The filter in a child: the families allowed open, the others fail with
    /// EAFNOSUPPORT, as under systemd.
    #[test]
    fn the_filter_refuses_every_family_but_those_allowed() {
        // Made before the fork: the child of a threaded process must not allocate.
        let mut prog = families_filter(&[libc::AF_UNIX, libc::AF_INET]).unwrap();
        // SAFETY: the child only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                if install_filter(&mut prog).is_err() {
                    return 10;
                }
                // SAFETY: plain socket calls, each closed.
                unsafe {
                    let ok = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
                    if ok < 0 {
                        return 11;
                    }
                    libc::close(ok);
                    let refused = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0);
                    if refused >= 0 || *libc::__errno_location() != libc::EAFNOSUPPORT {
                        return 12;
                    }
                    let refused6 = libc::socket(libc::AF_INET6, libc::SOCK_DGRAM, 0);
                    if refused6 >= 0 {
                        return 13;
                    }
                }
                0
            })();
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0, "child step failed");
    }
}
