//! The SSRF guard: the addresses an attempt must not connect to (unless the server runs with
//! `--webhook-allow-private`), so that an endpoint URL cannot make the service reach into its
//! own host, its network or the cloud's metadata service.
//!
//! Refused, in both families: loopback, private (RFC 1918) and unique-local, link-local
//! (169.254.169.254, the cloud metadata service, is one), unspecified, multicast; for IPv4
//! also the rest of 0.0.0.0/8, the shared address space 100.64.0.0/10 (carrier-grade NAT,
//! where some clouds put their metadata service) and 240.0.0.0/4 (reserved, with the
//! broadcast address); for IPv6 also the deprecated site-local fec0::/10.
//!
//! An IPv6 address that stands for an IPv4 one counts as that IPv4 address: IPv4-mapped
//! (`::ffff:a.b.c.d`, as the contract says), the deprecated IPv4-compatible (`::a.b.c.d`,
//! which some stacks still route to the IPv4 host), the NAT64 well-known prefix
//! (`64:ff9b::a.b.c.d`) and 6to4 (`2002:AABB:CCDD::/48`). Teredo addresses are not unwrapped:
//! their IPv4 part is a public relay's, and the client's is obfuscated.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The refused IPv4 ranges: network, prefix length, class.
const REFUSED_V4: &[(Ipv4Addr, u32, &str)] = &[
    (
        Ipv4Addr::new(0, 0, 0, 0),
        8,
        "this network, the unspecified address",
    ),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private"),
    (Ipv4Addr::new(100, 64, 0, 0), 10, "shared address space"),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
    (
        Ipv4Addr::new(240, 0, 0, 0),
        4,
        "reserved, the broadcast address",
    ),
];

/// The refused IPv6 ranges: network, prefix length, class.
const REFUSED_V6: &[(Ipv6Addr, u32, &str)] = &[
    (Ipv6Addr::UNSPECIFIED, 128, "unspecified"),
    (Ipv6Addr::LOCALHOST, 128, "loopback"),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "unique-local",
    ),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link-local"),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, "site-local"),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast"),
];

/// Whether an attempt must not connect to `ip`.
pub(crate) fn refused(ip: IpAddr) -> bool {
    refusal(ip).is_some()
}

/// The class for which `ip` is refused (`"loopback"`, `"private"`, …), or `None` if an
/// attempt may connect to it.
pub(crate) fn refusal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refusal_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => refusal_v4(v4),
            None => refusal_v6(v6),
        },
    }
}

fn refusal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(ip);
    REFUSED_V4.iter().find_map(|&(net, len, class)| {
        let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
        (bits & mask == u32::from(net)).then_some(class)
    })
}

fn refusal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    REFUSED_V6.iter().find_map(|&(net, len, class)| {
        let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
        (bits & mask == u128::from(net)).then_some(class)
    })
}

/// The IPv4 address an IPv6 one stands for, if it is IPv4-mapped, IPv4-compatible (but not
/// `::` or `::1`, which are IPv6's own), NAT64 or 6to4.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    // The low 32 bits; the truncation is the point.
    let low = Ipv4Addr::from(bits as u32);
    let segments = ip.segments();
    match bits >> 32 {
        // ::ffff:a.b.c.d, IPv4-mapped.
        0xffff => Some(low),
        // ::a.b.c.d, IPv4-compatible.
        0 if bits > 1 => Some(low),
        // 64:ff9b::a.b.c.d, the NAT64 well-known prefix (RFC 6052).
        0x0064_ff9b_0000_0000_0000_0000 => Some(low),
        // 2002:AABB:CCDD::/48, 6to4 (RFC 3056).
        _ if segments[0] == 0x2002 => Some(Ipv4Addr::from(
            (u32::from(segments[1]) << 16) | u32::from(segments[2]),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every class in both families, the edges of each range, and the forms an IPv6 address
    /// takes to stand for an IPv4 one.
    const CASES: &[(&str, bool, &str)] = &[
        // IPv4: 0.0.0.0/8 and the unspecified address.
        ("0.0.0.0", true, "unspecified"),
        ("0.255.255.255", true, "the end of 0.0.0.0/8"),
        ("1.0.0.0", false, "after 0.0.0.0/8"),
        // Private, RFC 1918.
        ("9.255.255.255", false, "before 10/8"),
        ("10.0.0.0", true, "the start of 10/8"),
        ("10.255.255.255", true, "the end of 10/8"),
        ("11.0.0.0", false, "after 10/8"),
        ("172.15.255.255", false, "before 172.16/12"),
        ("172.16.0.0", true, "the start of 172.16/12"),
        ("172.31.255.255", true, "the end of 172.16/12"),
        ("172.32.0.0", false, "after 172.16/12"),
        ("192.167.255.255", false, "before 192.168/16"),
        ("192.168.0.0", true, "the start of 192.168/16"),
        ("192.168.255.255", true, "the end of 192.168/16"),
        ("192.169.0.0", false, "after 192.168/16"),
        // Shared address space.
        ("100.63.255.255", false, "before 100.64/10"),
        ("100.64.0.0", true, "the start of 100.64/10"),
        (
            "100.100.100.200",
            true,
            "a cloud's metadata service in 100.64/10",
        ),
        ("100.127.255.255", true, "the end of 100.64/10"),
        ("100.128.0.0", false, "after 100.64/10"),
        // Loopback.
        ("126.255.255.255", false, "before 127/8"),
        ("127.0.0.1", true, "loopback"),
        ("127.0.0.0", true, "the start of 127/8"),
        ("127.255.255.255", true, "the end of 127/8"),
        ("128.0.0.0", false, "after 127/8"),
        // Link-local, cloud metadata.
        ("169.253.255.255", false, "before 169.254/16"),
        ("169.254.0.0", true, "the start of 169.254/16"),
        ("169.254.169.254", true, "cloud metadata"),
        ("169.254.255.255", true, "the end of 169.254/16"),
        ("169.255.0.0", false, "after 169.254/16"),
        // Multicast, reserved, broadcast.
        ("223.255.255.255", false, "before 224/4"),
        ("224.0.0.0", true, "the start of multicast"),
        ("239.255.255.255", true, "the end of multicast"),
        ("240.0.0.0", true, "the start of 240/4"),
        ("255.255.255.255", true, "broadcast"),
        // Public IPv4.
        ("8.8.8.8", false, "public"),
        ("1.1.1.1", false, "public"),
        ("93.184.215.14", false, "public"),
        // IPv6: unspecified, loopback.
        ("::", true, "unspecified"),
        ("::1", true, "loopback"),
        // Unique-local fc00::/7.
        (
            "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            false,
            "before fc00::/7",
        ),
        ("fc00::", true, "the start of fc00::/7"),
        ("fd12:3456::1", true, "unique-local"),
        (
            "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            true,
            "the end of fc00::/7",
        ),
        ("fe00::", false, "after fc00::/7"),
        // Link-local fe80::/10, site-local fec0::/10.
        (
            "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            false,
            "before fe80::/10",
        ),
        ("fe80::", true, "the start of fe80::/10"),
        ("fe80::1", true, "link-local"),
        (
            "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            true,
            "the end of fe80::/10",
        ),
        ("fec0::1", true, "site-local"),
        (
            "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            true,
            "the end of fec0::/10",
        ),
        // Multicast ff00::/8.
        ("ff00::", true, "the start of ff00::/8"),
        ("ff02::1", true, "all nodes"),
        (
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            true,
            "the end of ff00::/8",
        ),
        // Public IPv6.
        ("2606:4700::1111", false, "public"),
        ("2001:4860:4860::8888", false, "public"),
        (
            "::2:0:0",
            false,
            "neither compatible nor mapped: ::2:0:0/96 is no IPv4",
        ),
        // IPv4-mapped.
        ("::ffff:127.0.0.1", true, "mapped loopback"),
        ("::ffff:10.0.0.1", true, "mapped private"),
        ("::ffff:169.254.169.254", true, "mapped metadata"),
        ("::ffff:0.0.0.0", true, "mapped unspecified"),
        ("::ffff:172.32.0.0", false, "mapped public"),
        ("::ffff:8.8.8.8", false, "mapped public"),
        // IPv4-compatible (deprecated).
        ("::127.0.0.1", true, "compatible loopback"),
        ("::192.168.1.1", true, "compatible private"),
        ("::0.0.0.2", true, "compatible, in 0.0.0.0/8"),
        ("::8.8.8.8", false, "compatible public"),
        // NAT64 and 6to4.
        ("64:ff9b::127.0.0.1", true, "NAT64 loopback"),
        ("64:ff9b::a9fe:a9fe", true, "NAT64 metadata"),
        ("64:ff9b::8.8.8.8", false, "NAT64 public"),
        ("2002:7f00:1::", true, "6to4 of loopback"),
        ("2002:a00:1::1", true, "6to4 of 10.0.0.1"),
        ("2002:808:808::1", false, "6to4 of 8.8.8.8"),
    ];

    #[test]
    fn each_class_is_refused_and_public_addresses_are_not() {
        for &(text, expected, why) in CASES {
            let ip: IpAddr = text.parse().expect("a valid address in the table");
            assert_eq!(refused(ip), expected, "{text} ({why})");
        }
    }

    #[test]
    fn a_refusal_names_its_class() {
        let class = |text: &str| refusal(text.parse().expect("an address"));
        assert_eq!(class("127.0.0.1"), Some("loopback"));
        assert_eq!(class("::ffff:127.0.0.1"), Some("loopback"));
        assert_eq!(class("169.254.169.254"), Some("link-local"));
        assert_eq!(class("fd00::1"), Some("unique-local"));
        assert_eq!(class("172.20.0.1"), Some("private"));
        assert_eq!(class("8.8.8.8"), None);
    }
}
