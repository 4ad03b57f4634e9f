//! What the host running a test or an experiment is doing besides it: its load, which
//! every figure reports beside itself (the machine is shared).

/// `/proc/loadavg` as the kernel gives it (the three load averages, the runnable and
/// total tasks, the last PID), or an empty string where it cannot be read.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The 1, 5 and 15-minute load averages, space-separated.
pub fn load_averages() -> String {
    load()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_averages_are_the_loads_first_three_fields() {
        let averages = super::load_averages();
        assert_eq!(averages.split(' ').count(), 3, "{averages}");
        assert!(super::load().starts_with(&averages));
        for a in averages.split(' ') {
            a.parse::<f64>().unwrap();
        }
    }
}
