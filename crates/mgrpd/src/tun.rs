//! The daemon's TUN device: created with the configured name, MTU and address,
//! with the interface settings the data path relies on.

use anyhow::Context as _;
use tracing::info;
use tun_rs::DeviceBuilder;

use crate::config::Config;
use crate::sys;

/// Creates the TUN device and brings it up.
pub(crate) fn create(config: &Config) -> anyhow::Result<tun_rs::SyncDevice> {
    let dev = DeviceBuilder::new()
        .name(config.tun.clone())
        .mtu(config.mtu)
        .ipv4(config.tun_address, 32u8, None)
        .offload(config.tun_offload)
        .enable(false)
        .build_sync()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot create TUN {}: {e}; is another mgrpd using that name, or does an interface of that name exist? choose another with --tun",
                config.tun
            )
        })?;
    // No IPv6 link-local address, so the kernel sends no IPv6 housekeeping into the
    // TUN. Reverse-path filtering as strict as the routes allow: loose where the route
    // back to a rider's source may lead elsewhere (riders were admitted by source
    // already). The kernel applies the larger of this value and `all`'s, so a host
    // with `all` at 2 stays loose.
    let _ = sys::set_if_sysctl("ipv6", &config.tun, "addr_gen_mode", "1");
    let rp = match config.strict_rp_filter() {
        Ok(()) => {
            info!("strict reverse-path filtering on {}", config.tun);
            "1"
        }
        Err(why) => {
            info!("loose reverse-path filtering on {}: {why}", config.tun);
            "2"
        }
    };
    sys::set_if_sysctl("ipv4", &config.tun, "rp_filter", rp)
        .with_context(|| format!("cannot set rp_filter on {}", config.tun))?;
    dev.enabled(true)
        .with_context(|| format!("cannot bring {} up", config.tun))?;
    Ok(dev)
}

/// Creates a next-hop device (see [`crate::config::NextHopDevice`]) and brings it up:
/// no address, nothing routed into it by mgrpd (policy routing chooses what is), the
/// MTU of one continuation to its peer when that peer is reached over UDP.
pub(crate) fn create_next_hop(
    config: &Config,
    device: &crate::config::NextHopDevice,
) -> anyhow::Result<tun_rs::SyncDevice> {
    let mtu = config
        .route_mtu(ipnet::IpNet::from(device.peer))
        .unwrap_or(config.mtu);
    let dev = DeviceBuilder::new()
        .name(device.name.clone())
        .mtu(mtu)
        .offload(config.tun_offload)
        .enable(false)
        .build_sync()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot create the next-hop device {} (peer {}): {e}; does an interface of that name exist? choose another with device = in the peer's [[peers]] table",
                device.name,
                device.peer
            )
        })?;
    let _ = sys::set_if_sysctl("ipv6", &device.name, "addr_gen_mode", "1");
    dev.enabled(true)
        .with_context(|| format!("cannot bring {} up", device.name))?;
    info!(
        "next-hop device {} (mtu {mtu}): what is routed into it goes to {}",
        device.name, device.peer
    );
    Ok(dev)
}
