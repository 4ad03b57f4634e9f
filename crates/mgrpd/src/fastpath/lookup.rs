//! The netlink lookups behind the path cache: the route the kernel takes for a
//! destination with mgrpd's mark, the device's link type, and its next hop's
//! neighbour entry.

use std::net::IpAddr;

use futures_util::TryStreamExt;
use rtnetlink::RouteMessageBuilder;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::link::{LinkAttribute, LinkLayerType};
use rtnetlink::packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourState};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteVia};
use tokio::sync::mpsc;
use tracing::{debug, info};

use super::{FastPath, LinkPath};

/// Looks up the paths the data path asks for, until the daemon stops: the route the
/// kernel takes for `dst` with mgrpd's mark, the device's link type, and its next
/// hop's neighbour entry.
pub(crate) async fn resolve(
    fast: std::sync::Arc<FastPath>,
    mut requests: mpsc::UnboundedReceiver<IpAddr>,
    mark: u32,
) {
    let handle = match rtnetlink::new_connection() {
        Ok((conn, handle, _)) => {
            tokio::spawn(conn);
            handle
        }
        Err(e) => {
            info!("no netlink for the super-packet path ({e}); unchanged packets go one by one");
            return;
        }
    };
    while let Some(dst) = requests.recv().await {
        let path = match lookup(&handle, dst, mark).await {
            Ok(p) => p,
            Err(e) => {
                debug!("no link path to {dst}: {e}");
                None
            }
        };
        debug!("link path to {dst}: {path:?}");
        fast.settle(dst, path);
    }
}

async fn lookup(
    handle: &rtnetlink::Handle,
    dst: IpAddr,
    mark: u32,
) -> Result<Option<LinkPath>, rtnetlink::Error> {
    let msg = match dst {
        IpAddr::V4(a) => RouteMessageBuilder::<std::net::Ipv4Addr>::new()
            .destination_prefix(a, 32)
            .mark(mark)
            .build(),
        IpAddr::V6(a) => RouteMessageBuilder::<std::net::Ipv6Addr>::new()
            .destination_prefix(a, 128)
            .mark(mark)
            .build(),
    };
    let Some(route) = handle.route().get(msg).execute().try_next().await? else {
        return Ok(None);
    };
    let mut oif = None;
    let mut next_hop = dst;
    for a in &route.attributes {
        match a {
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Gateway(RouteAddress::Inet(g)) => next_hop = IpAddr::V4(*g),
            RouteAttribute::Gateway(RouteAddress::Inet6(g)) => next_hop = IpAddr::V6(*g),
            RouteAttribute::Via(RouteVia::Inet(g)) => next_hop = IpAddr::V4(*g),
            RouteAttribute::Via(RouteVia::Inet6(g)) => next_hop = IpAddr::V6(*g),
            _ => {}
        }
    }
    let Some(ifindex) = oif else { return Ok(None) };
    let Some(link) = handle
        .link()
        .get()
        .match_index(ifindex)
        .execute()
        .try_next()
        .await?
    else {
        return Ok(None);
    };
    let Some(mtu) = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Mtu(m) => Some(*m),
        _ => None,
    }) else {
        return Ok(None);
    };
    let own = match link.header.link_layer_type {
        LinkLayerType::Ether => link.attributes.iter().find_map(|a| match a {
            LinkAttribute::Address(m) if m.len() == 6 => Some([m[0], m[1], m[2], m[3], m[4], m[5]]),
            _ => None,
        }),
        // Devices without link headers (tunnels, TUN): no address to find.
        LinkLayerType::None => {
            return Ok(Some(LinkPath {
                ifindex,
                mtu,
                ether: None,
            }));
        }
        // Anything else keeps the raw socket.
        _ => return Ok(None),
    };
    let Some(own) = own else { return Ok(None) };
    let family = if dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let mut neighbours = handle
        .neighbours()
        .get()
        .set_address_family(family)
        .execute();
    while let Some(n) = neighbours.try_next().await? {
        if n.header.ifindex != ifindex {
            continue;
        }
        let usable = !matches!(
            n.header.state,
            NeighbourState::Incomplete | NeighbourState::Failed | NeighbourState::None
        );
        let mut ip = None;
        let mut mac = None;
        for a in &n.attributes {
            match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(x)) => {
                    ip = Some(IpAddr::V4(*x));
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(x)) => {
                    ip = Some(IpAddr::V6(*x));
                }
                NeighbourAttribute::LinkLayerAddress(l) if l.len() == 6 => {
                    mac = Some([l[0], l[1], l[2], l[3], l[4], l[5]]);
                }
                _ => {}
            }
        }
        if usable
            && ip == Some(next_hop)
            && let Some(mac) = mac
        {
            let mut ether = [0u8; 12];
            ether[..6].copy_from_slice(&mac);
            ether[6..].copy_from_slice(&own);
            return Ok(Some(LinkPath {
                ifindex,
                mtu,
                ether: Some(ether),
            }));
        }
    }
    Ok(None)
}
