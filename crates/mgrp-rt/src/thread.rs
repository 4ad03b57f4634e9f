//! The calling thread's (and process's) claim on the CPU: real-time scheduling,
//! timer slack, CPU pinning, memory locking.

use std::io;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::sys::mman::{MlockAllFlags, mlockall};
use nix::sys::prctl;
use nix::unistd::Pid;

/// Asks for SCHED_FIFO at `priority` for the calling thread.
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 = calling thread; param is valid. nix does not wrap this call.
    #[allow(unsafe_code)]
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the calling thread's timer slack (nanoseconds); 1 is the smallest.
pub fn set_timer_slack(ns: u64) {
    let _ = prctl::set_timerslack(ns);
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "CPU index out of range"))?;
    sched_setaffinity(Pid::from_raw(0), &set)?;
    Ok(())
}

/// The CPUs in `set`, lowest first.
fn members(set: &CpuSet) -> impl Iterator<Item = usize> + '_ {
    (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false))
}

/// The CPUs the calling thread may run on, lowest first.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    Ok(members(&sched_getaffinity(Pid::from_raw(0))?).collect())
}

/// Moves every thread of this process off `cpu`: each may run on the CPUs the
/// calling thread may run on, less `cpu`. Threads started afterwards inherit their
/// creator's set. Returns how many threads were moved; refuses (moving nothing) when
/// `cpu` is the only CPU the calling thread may run on.
pub fn keep_process_off(cpu: usize) -> io::Result<usize> {
    let mut set = sched_getaffinity(Pid::from_raw(0))?;
    set.unset(cpu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "CPU index out of range"))?;
    if members(&set).next().is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is the only one this process may run on"),
        ));
    }
    let mut moved = 0;
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        match sched_setaffinity(Pid::from_raw(tid), &set) {
            Ok(()) => moved += 1,
            // Ended since the directory was read.
            Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(moved)
}

/// Locks the process's memory, now and in future, so a real-time thread never
/// takes a page fault.
pub fn lock_memory() -> io::Result<()> {
    mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE)?;
    Ok(())
}

/// Raises this process's limit of open descriptors (`RLIMIT_NOFILE`) to its hard
/// limit; returns the limit in force after. A server whose clients may hold many
/// connections runs out of descriptors at the soft limit (often 1024) long before
/// the system would.
pub fn raise_descriptor_limit() -> io::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(soft.max(hard))
}
