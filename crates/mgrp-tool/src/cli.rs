//! The command-line flags every tool shares: `snd`'s, and the receiver's flags that
//! say where the sender is and how probes travel.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use clap::{Args, Subcommand, ValueEnum};

use crate::control::{
    DEFAULT_CONTROL_PORT, DEFAULT_PROBE_PORT, DEFAULT_SENDER_PROBE_PORT, Transport,
};
use crate::server::{
    DEFAULT_BYTES_PER_HOUR, DEFAULT_IPV6_PREFIX, DEFAULT_PROBE_BPS, MAX_EXCLUSIVE,
    MAX_MEASUREMENTS, MAX_MEASUREMENTS_PER_HOST, MAX_WAITING_EXCLUSIVE, PROBE_RATE_WINDOW,
    SenderLimits, ServeOptions,
};
use crate::session::{MeasureError, SessionOptions};
#[doc(no_inline)]
pub use clap;
use mgrp_core::peers::Prefix;

/// Where mgrpd listens unless told otherwise.
const DEFAULT_SOCKET: &str = mgrp_client::DEFAULT_SOCKET;

/// How probes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    /// Probe transactions through mgrpd; application traffic may ride in them.
    Mgrp,
    /// Plain UDP, paced by the tool (the no-MGRP baseline).
    Udp,
}

impl From<TransportArg> for Transport {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Mgrp => Self::Mgrp,
            TransportArg::Udp => Self::Udp,
        }
    }
}

/// A duration flag whose bare number is in seconds, as the tools always read it
/// (`--duration 90`), that also takes humantime's units (`90s`, `1m 30s`, `2h`, `250ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seconds(pub std::time::Duration);

/// A duration flag whose bare number is in milliseconds (`--slot 5`), that also takes
/// humantime's units (`5ms`, `1.5ms`, `500us`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Millis(pub std::time::Duration);

/// `text` as a duration: a bare number in units of `unit` seconds, or humantime's.
fn duration(text: &str, unit: f64, bare: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    if let Ok(x) = text.parse::<f64>() {
        return std::time::Duration::try_from_secs_f64(x * unit).map_err(|_| {
            format!("{text:?} is not a duration: give a number of {bare} at least 0, or a unit (90s, 1m 30s, 5ms)")
        });
    }
    humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration ({e}): give a number of {bare}, or a number and a unit (90s, 1m 30s, 5ms)")
    })
}

impl std::str::FromStr for Seconds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        duration(s, 1.0, "seconds").map(Self)
    }
}

impl std::str::FromStr for Millis {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        duration(s, 1e-3, "milliseconds").map(Self)
    }
}

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

/// Parses `args` (the program's name first) as `tool`'s command line `C`. Help and
/// the version are printed; a usage error is said on stderr as clap says it, and also
/// as a JSON line when `--json` is among the arguments. `Err` holds the exit status.
pub fn parse<C, I, T>(tool: &str, args: I) -> Result<C, i32>
where
    C: clap::Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    C::try_parse_from(&args).map_err(|e| {
        let _ = e.print();
        if !e.use_stderr() {
            return 0;
        }
        if args.iter().skip(1).any(|a| a == "--json") {
            crate::json::enable();
            let message = e.render().to_string();
            let first = message.lines().next().unwrap_or("");
            crate::json::error(
                tool,
                crate::exit::USAGE,
                first.trim_start_matches("error: "),
            );
        }
        crate::exit::USAGE
    })
}

/// A tool's command line as its binary parses it: `snd`, the same for every tool, and
/// the tool's own `rcv`. [`crate::tool!`] implements it for a tool's `clap` parser
/// and gives the tool crate its `command()` and `main_with_args()`.
pub trait Tool: clap::Parser {
    /// The tool's name, in the sender's log and in messages.
    const NAME: &'static str;
    /// `rcv`'s arguments.
    type Rcv: Args;
    /// The role the command line chose.
    fn role(self) -> Role<Self::Rcv>;
    /// Whether `rcv`'s output is JSON lines (its errors are then JSON lines too).
    fn json(args: &Self::Rcv) -> bool;
    /// `rcv`: the measurement `args` ask for, run until done or `stop` is set and
    /// printed; gives the exit status.
    fn receive(args: &Self::Rcv, stop: &AtomicBool) -> Result<i32, RcvError>;
}

/// Why `rcv` measured nothing.
#[derive(Debug)]
pub enum RcvError {
    /// The flags do not make a measurement: what is wrong with them.
    Options(String),
    /// The measurement could not start.
    Measure(MeasureError),
}

impl RcvError {
    /// Flags that do not make a measurement, for `map_err`.
    pub fn options(e: impl std::fmt::Display) -> Self {
        Self::Options(e.to_string())
    }
}

impl From<MeasureError> for RcvError {
    fn from(e: MeasureError) -> Self {
        Self::Measure(e)
    }
}

/// Runs `rcv` of the tool `C` with `args` and gives its exit status; bad flags and a
/// measurement that could not start are said as the tool's, in JSON too if asked.
fn receive<C: Tool>(args: &C::Rcv) -> i32 {
    if C::json(args) {
        crate::json::enable();
    }
    match C::receive(args, crate::sys::interrupt_flag()) {
        Ok(status) => status,
        Err(RcvError::Options(e)) => crate::exit::bad_options(C::NAME, e),
        Err(RcvError::Measure(e)) => e.report(C::NAME),
    }
}

/// The command line of the tool `C`, with every subcommand and flag.
pub fn command<C: clap::CommandFactory>() -> clap::Command {
    C::command()
}

/// Runs the tool `C` with `args` (the program name first) and returns its exit code.
pub fn main<C: Tool>(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> i32 {
    match parse::<C, _, _>(C::NAME, args) {
        Ok(cli) => cli.role().run(C::NAME, receive::<C>),
        Err(status) => status,
    }
}

/// A tool crate's command line from its parts: `$cli`, the `clap` parser with its
/// roles in a field `role: Role<$rcv>`; `$rcv`, `rcv`'s arguments with a flag `json`;
/// and `$run`, `rcv` itself (`fn(&$rcv, &AtomicBool) -> Result<i32, RcvError>`).
/// Implements [`Tool`] for `$cli` as `$name` and defines the crate's `command()`, the
/// command line with every subcommand and flag, and `main_with_args()`, which runs the
/// tool as its binary does.
#[macro_export]
macro_rules! tool {
    ($name:expr, $cli:ty, $rcv:ty, $run:path) => {
        impl $crate::cli::Tool for $cli {
            const NAME: &'static str = $name;
            type Rcv = $rcv;

            fn role(self) -> $crate::cli::Role<$rcv> {
                self.role
            }

            fn json(args: &$rcv) -> bool {
                args.json
            }

            fn receive(
                args: &$rcv,
                stop: &::std::sync::atomic::AtomicBool,
            ) -> ::std::result::Result<i32, $crate::cli::RcvError> {
                $run(args, stop)
            }
        }

        /// The command line this tool reads, with every subcommand and flag (for help
        /// texts and the guides' checks).
        pub fn command() -> $crate::cli::clap::Command {
            $crate::cli::command::<$cli>()
        }

        /// Runs the tool with `args` (the program name first, as `std::env::args_os`
        /// gives them) and returns its exit code. Parse errors and `--help` print and
        /// exit the process, as a command-line tool does.
        pub fn main_with_args(
            args: impl IntoIterator<Item = impl Into<::std::ffi::OsString> + Clone>,
        ) -> i32 {
            $crate::cli::main::<$cli>(args)
        }
    };
}

/// A tool's two roles: `snd`, the same for every tool, and `rcv` with the tool's
/// own arguments `R` (whose doc comment is `rcv`'s line in `--help`).
#[derive(Debug, Subcommand)]
pub enum Role<R: Args> {
    /// Serve measurements: send the probes a receiver asks for.
    Snd(SndArgs),
    // No doc comment here: clap would show it for every tool; `R`'s is shown.
    #[allow(missing_docs)]
    Rcv(R),
}

impl<R: Args> Role<R> {
    /// Runs the role with interrupts caught: `snd` serves as `tool`, `rcv` is
    /// `receive`. Returns the exit code.
    pub fn run(self, tool: &str, receive: impl FnOnce(&R) -> i32) -> i32 {
        crate::sys::catch_interrupts();
        match self {
            Self::Snd(args) => args.run(tool),
            Self::Rcv(args) => receive(&args),
        }
    }
}

/// Arguments of `snd`.
#[derive(Debug, Args)]
pub struct SndArgs {
    /// Control port to listen on.
    #[arg(long, default_value_t = DEFAULT_CONTROL_PORT)]
    pub port: u16,
    /// Address to listen on (default: every address, IPv6 and IPv4).
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// How probes travel; the receiver must use the same.
    #[arg(long, value_enum, default_value_t = TransportArg::Mgrp)]
    pub transport: TransportArg,
    /// mgrpd's API socket (MGRP transport).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// The sender's probe port (UDP source port; MGRP measurement port).
    #[arg(long, default_value_t = DEFAULT_SENDER_PROBE_PORT)]
    pub probe_port: u16,
    /// Keep serving measurements one after another instead of exiting after one.
    #[arg(long)]
    pub keep_serving: bool,
    /// Never let application traffic ride in the probes, whatever the receiver asks.
    #[arg(long)]
    pub no_piggyback: bool,
    /// Serve only receivers inside this prefix (an address or ADDRESS/LEN; repeat for
    /// more). Without it any host that reaches the control port may measure.
    #[arg(long, value_name = "PREFIX")]
    pub allow: Vec<Prefix>,
    /// Probe megabytes each receiver may have per hour (a pathload run on a 10 Mbit/s
    /// path takes about 1.3 MB, on a 1 Gbit/s path about 90 MB).
    #[arg(long, value_name = "MB", default_value_t = DEFAULT_BYTES_PER_HOUR as f64 / 1e6)]
    pub max_mb_per_hour: f64,
    /// Probe megabits per second each receiver may have, averaged over 10 s (a
    /// pathload run over a 1 Gbit/s path draws about 90 MB in all, well within it).
    #[arg(long, value_name = "MBIT/S", default_value_t = DEFAULT_PROBE_BPS as f64 / 1e6)]
    pub max_probe_mbps: f64,
    /// How many leading bits of an IPv6 address make one receiver for every limit
    /// (connections, measurements, budgets, captures, queries); IPv4 receivers are
    /// their address.
    #[arg(long, value_name = "LEN", default_value_t = DEFAULT_IPV6_PREFIX,
          value_parser = clap::value_parser!(u8).range(1..=128))]
    pub ipv6_prefix: u8,
    /// Measurements served at once, for every receiver together.
    #[arg(long, value_name = "N", default_value_t = MAX_MEASUREMENTS)]
    pub max_measurements: usize,
    /// Measurements one receiver may have at once.
    #[arg(long, value_name = "N", default_value_t = MAX_MEASUREMENTS_PER_HOST)]
    pub max_measurements_per_receiver: usize,
    /// Measurements that load their path (pathload, btc) served at once; more
    /// than one disturb each other where their paths share a link.
    #[arg(long, value_name = "N", default_value_t = MAX_EXCLUSIVE)]
    pub max_exclusive: usize,
    /// Receivers that wait in line for such a measurement.
    #[arg(long, value_name = "N", default_value_t = MAX_WAITING_EXCLUSIVE)]
    pub max_waiting: usize,
    /// Connections open at once (measurements, queries, refusals being said)
    /// [default: 64, or twice --max-measurements where that is more].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Connections one receiver may have open at once [default: 8, or twice
    /// --max-measurements-per-receiver where that is more].
    #[arg(long, value_name = "N")]
    pub max_connections_per_receiver: Option<usize>,
    /// Log refused requests.
    #[arg(short, long)]
    pub verbose: bool,
}

impl SndArgs {
    /// Runs `tool`'s `snd` with these flags: serves until done or interrupted, and
    /// gives the exit status (errors said on standard error).
    pub fn run(&self, tool: &str) -> i32 {
        let opts = self.options(&format!("{tool} snd"));
        match crate::serve_command(&opts, self.keep_serving, self.verbose) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{tool}: {e:#}");
                crate::exit::ERROR
            }
        }
    }

    /// How these flags ask to serve, as `name` (a tool's `snd`).
    pub fn options(&self, name: &str) -> ServeOptions {
        ServeOptions {
            port: self.port,
            bind: self.bind,
            transport: self.transport.into(),
            socket: self.socket.clone(),
            probe_port: self.probe_port,
            piggyback: !self.no_piggyback,
            name: name.to_string(),
            allow: self.allow.clone(),
            max_bytes_per_hour: (self.max_mb_per_hour.max(0.0) * 1e6) as u64,
            max_probe_bps: (self.max_probe_mbps.max(0.0) * 1e6) as u64,
            probe_rate_window: PROBE_RATE_WINDOW,
            ipv6_prefix: self.ipv6_prefix,
            limits: SenderLimits::given(
                Some(self.max_measurements),
                Some(self.max_measurements_per_receiver),
                Some(self.max_exclusive),
                Some(self.max_waiting),
                self.max_connections,
                self.max_connections_per_receiver,
            ),
            ..ServeOptions::new(self.transport.into())
        }
    }
}

/// A receiver's flags for where the sender is and how probes travel.
#[derive(Debug, Args)]
pub struct PeerArgs {
    /// The sending host (name or address) running a tool's `snd` (any of the
    /// workspace's tools serves every tool's receivers).
    #[arg(long, short = 's')]
    pub sender: String,
    /// The sender's control port.
    #[arg(long, default_value_t = DEFAULT_CONTROL_PORT)]
    pub port: u16,
    /// How probes travel; the sender must use the same.
    #[arg(long, value_enum, default_value_t = TransportArg::Mgrp)]
    pub transport: TransportArg,
    /// mgrpd's API socket (MGRP transport).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// This host's probe port.
    #[arg(long, default_value_t = DEFAULT_PROBE_PORT)]
    pub probe_port: u16,
    /// The address the sender should send probes to (default: the one the control
    /// connection comes from).
    #[arg(long)]
    pub address: Option<IpAddr>,
    /// Keep application traffic out of the probes (MGRP without piggybacking).
    #[arg(long)]
    pub no_piggyback: bool,
}

impl PeerArgs {
    /// The session these flags ask for, by `tool` (not exclusive: a tool whose
    /// measurement loads the path sets that).
    pub fn options(&self, tool: &str) -> SessionOptions {
        SessionOptions {
            sender: self.sender.clone(),
            port: self.port,
            transport: self.transport.into(),
            socket: self.socket.clone(),
            probe_port: self.probe_port,
            address: self.address,
            piggyback: !self.no_piggyback,
            sender_is: format!("`{tool} snd` (port {})", self.port),
            tool: tool.to_string(),
            exclusive: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Debug, clap::Parser)]
    struct Snd {
        #[command(flatten)]
        args: SndArgs,
    }

    #[test]
    fn snd_flags_set_the_rate_and_the_ipv6_prefix() {
        use clap::Parser;
        let o = Snd::parse_from(["t"]).args.options("t snd");
        assert_eq!(o.max_probe_bps, DEFAULT_PROBE_BPS);
        assert_eq!(o.probe_rate_window, PROBE_RATE_WINDOW);
        assert_eq!(o.ipv6_prefix, 64);
        let o = Snd::parse_from(["t", "--max-probe-mbps", "950", "--ipv6-prefix", "48"])
            .args
            .options("t snd");
        assert_eq!((o.max_probe_bps, o.ipv6_prefix), (950_000_000, 48));
        assert_eq!(o.limits, SenderLimits::default());
        // Connections follow the measurements when not given.
        let o = Snd::parse_from([
            "t",
            "--max-measurements",
            "100",
            "--max-measurements-per-receiver",
            "6",
        ])
        .args
        .options("t snd");
        assert_eq!(
            (o.limits.connections, o.limits.connections_per_requester),
            (200, 12)
        );
        assert_eq!(o.limits.check(), Ok(()));
        let o = Snd::parse_from([
            "t",
            "--max-measurements",
            "128",
            "--max-measurements-per-receiver",
            "12",
            "--max-connections",
            "256",
            "--max-connections-per-receiver",
            "16",
            "--max-exclusive",
            "2",
            "--max-waiting",
            "8",
        ])
        .args
        .options("t snd");
        assert_eq!(
            o.limits,
            SenderLimits {
                connections: 256,
                connections_per_requester: 16,
                measurements: 128,
                measurements_per_requester: 12,
                exclusive: 2,
                waiting: 8,
            }
        );
        assert!(Snd::try_parse_from(["t", "--ipv6-prefix", "129"]).is_err());
        assert!(Snd::try_parse_from(["t", "--ipv6-prefix", "0"]).is_err());
    }

    #[test]
    fn durations_are_bare_numbers_in_their_unit_or_humane() {
        let s = |t: &str| t.parse::<Seconds>().map(|x| x.0);
        let m = |t: &str| t.parse::<Millis>().map(|x| x.0);
        assert_eq!(s("90"), Ok(Duration::from_secs(90)));
        assert_eq!(s("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(s("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(s("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(m("5"), Ok(Duration::from_millis(5)));
        assert_eq!(m("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(m("1s"), Ok(Duration::from_secs(1)));
        for bad in ["-1", "soon", "5 parsecs", "NaN", ""] {
            let e = s(bad).unwrap_err();
            assert!(e.contains("not a duration"), "{bad}: {e}");
        }
        assert_eq!(Seconds(Duration::from_secs(600)).to_string(), "10m");
        assert_eq!(Millis(Duration::from_millis(100)).to_string(), "100ms");
        assert_eq!(
            Millis(Duration::from_millis(100))
                .to_string()
                .parse::<Millis>(),
            Ok(Millis(Duration::from_millis(100)))
        );
    }
}
