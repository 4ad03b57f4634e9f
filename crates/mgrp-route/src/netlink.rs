//! Route control's routes and rules through rtnetlink, as mgrpd installs its own: each
//! batch of requests ([`run`]) on a thread of its own with a one-thread runtime (route
//! control's callers may be inside a tokio runtime already, where another cannot
//! block), each request answered before the next.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use futures_util::TryStreamExt as _;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::route::{RouteAttribute, RouteMessage, RouteProtocol, RouteScope};
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use rtnetlink::{Handle, RouteMessageBuilder};

/// A policy rule: `priority P fwmark MARK/MASK lookup TABLE` (IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) priority: u32,
    pub(crate) mark: u32,
    pub(crate) mask: u32,
    pub(crate) table: u32,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rule priority {} fwmark {:#x}/{:#x} lookup {}",
            self.priority, self.mark, self.mask, self.table
        )
    }
}

impl Rule {
    fn message(self) -> RuleMessage {
        let mut m = RuleMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.action = RuleAction::ToTable;
        m.attributes.extend([
            RuleAttribute::FwMark(self.mark),
            RuleAttribute::FwMask(self.mask),
            RuleAttribute::Table(self.table),
            RuleAttribute::Priority(self.priority),
        ]);
        m
    }
}

/// A route of table `table`: `destination` (an address, or a prefix) into `device`,
/// with a preferred source; scope link and protocol boot, as `ip route replace` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) table: u32,
    pub(crate) destination: (Ipv4Addr, u8),
    pub(crate) device: String,
    pub(crate) source: Option<Ipv4Addr>,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, len) = self.destination;
        write!(
            f,
            "route {a}/{len} dev {} table {}",
            self.device, self.table
        )?;
        if let Some(s) = self.source {
            write!(f, " src {s}")?;
        }
        Ok(())
    }
}

/// Runs `f` with a netlink handle on a thread of its own and waits for its answer;
/// `Err` says why netlink could not be reached. One call serves a whole batch of
/// requests (one thread, one runtime, one socket).
pub(crate) fn run<T, F, Fut>(f: F) -> Result<T, String>
where
    F: FnOnce(Handle) -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        rt.block_on(async move {
            let (connection, handle, _) =
                rtnetlink::new_connection().map_err(|e| format!("cannot open netlink: {e}"))?;
            tokio::spawn(connection);
            Ok(f(handle).await)
        })
    })
    .join()
    .map_err(|_| "the netlink thread panicked".to_owned())?
}

fn words(e: &rtnetlink::Error) -> String {
    match e {
        rtnetlink::Error::NetlinkError(m) => match m.code {
            Some(c) => std::io::Error::from_raw_os_error(-c.get()).to_string(),
            None => e.to_string(),
        },
        other => other.to_string(),
    }
}

/// Adds `rule`.
pub(crate) async fn add_rule(h: &Handle, rule: Rule) -> Result<(), String> {
    let mut req = h.rule().add();
    *req.message_mut() = rule.message();
    req.execute().await.map_err(|e| words(&e))
}

/// Deletes one rule like `rule`.
pub(crate) async fn del_rule(h: &Handle, rule: Rule) -> Result<(), String> {
    h.rule()
        .del(rule.message())
        .execute()
        .await
        .map_err(|e| words(&e))
}

/// Adds `route`, or replaces the route there to its destination in its table.
pub(crate) async fn replace_route(h: &Handle, route: &Route) -> Result<(), String> {
    let link = h
        .link()
        .get()
        .match_name(route.device.clone())
        .execute()
        .try_next()
        .await
        .map_err(|e| format!("no device {}: {}", route.device, words(&e)))?
        .ok_or_else(|| format!("no device {}", route.device))?;
    let (a, len) = route.destination;
    let mut b = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(a, len)
        .output_interface(link.header.index)
        .table_id(route.table)
        .scope(RouteScope::Link)
        .protocol(RouteProtocol::Boot);
    if let Some(s) = route.source {
        b = b.pref_source(s);
    }
    h.route()
        .add(b.build())
        .replace()
        .execute()
        .await
        .map_err(|e| words(&e))
}

fn table_of(m: &RouteMessage) -> u32 {
    m.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or_else(|| u32::from(m.header.table))
}

/// Deletes every IPv4 route of the tables `tables` (one dump for all of them).
pub(crate) async fn flush_tables(h: &Handle, tables: &[u32]) -> Result<(), String> {
    let all: Vec<RouteMessage> = h
        .route()
        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
        .execute()
        .try_collect()
        .await
        .map_err(|e| words(&e))?;
    for m in all.into_iter().filter(|m| tables.contains(&table_of(m))) {
        h.route().del(m).execute().await.map_err(|e| words(&e))?;
    }
    Ok(())
}

/// `address` as a destination: IPv4 only (route control's limit).
pub(crate) fn v4(address: IpAddr) -> Option<Ipv4Addr> {
    match address {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    }
}
