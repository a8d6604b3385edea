//! Which IP addresses the operator may connect to for forge calls (config key
//! [`REFUSE_PRIVATE_SETTING`]).
//!
//! A host name that passes `forgeHosts.allowed` can still resolve to cloud metadata
//! (169.254.169.254), the operator's own loopback or an in-cluster service: a tenant's DNS name
//! pointing inside the cluster, or DNS rebinding between the check and the connection. With the
//! setting on, the forge clients resolve names themselves and drop such addresses, and a URL
//! naming one as a literal is refused before any call. Off by default: many Gitea and Forgejo
//! instances run inside the cluster, on exactly such addresses.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The operator config key turning the refusal on (also the chart value's name).
pub const REFUSE_PRIVATE_SETTING: &str = "forgeHosts.refusePrivateAddresses";

/// A kind of address the operator refuses to connect to when [`AddressPolicy::RefusePrivate`]
/// is set: each reaches something inside the operator's own network rather than a forge on
/// the internet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// `0.0.0.0/8` and `::`: Linux connects them to the local host.
    Unspecified,
    /// `127.0.0.0/8` and `::1`: the operator's own pod.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// RFC 6598 shared address space `100.64/10` (carrier-grade NAT; some clouds put
    /// metadata services there, Alibaba's at 100.100.100.200).
    SharedAddressSpace,
    /// `169.254/16` (cloud metadata at 169.254.169.254) and `fe80::/10`.
    LinkLocal,
    /// RFC 4193 unique local `fc00::/7` (AWS's IPv6 metadata is `fd00:ec2::254`).
    UniqueLocal,
    /// `fec0::/10`, deprecated by RFC 3879 yet still routed inside some networks.
    SiteLocal,
    /// `224/4` and `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// The rest of `240/4` (reserved, "future use"), and IPv6's deprecated IPv4-compatible
    /// `::/96`.
    Reserved,
}

impl AddressClass {
    /// The class in words, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Unspecified => "unspecified",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private (RFC 1918)",
            AddressClass::SharedAddressSpace => "shared address space (RFC 6598, carrier-grade NAT)",
            AddressClass::LinkLocal => "link-local (incl. cloud metadata)",
            AddressClass::UniqueLocal => "unique local (RFC 4193)",
            AddressClass::SiteLocal => "site-local",
            AddressClass::Multicast => "multicast",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Reserved => "reserved",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of `ip` that [`AddressPolicy::RefusePrivate`] refuses, `None` for an address on
/// the internet. IPv4 addresses inside IPv6 (`::ffff:a.b.c.d`, and NAT64's `64:ff9b::/96`,
/// which a translator turns back into the IPv4 address) are judged as the IPv4 address.
pub fn classify(ip: IpAddr) -> Option<AddressClass> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddressClass> {
    let [a, b, ..] = ip.octets();
    Some(match (a, b) {
        (0, _) => AddressClass::Unspecified,
        (127, _) => AddressClass::Loopback,
        (10, _) | (172, 16..=31) | (192, 168) => AddressClass::Private,
        (100, 64..=127) => AddressClass::SharedAddressSpace,
        (169, 254) => AddressClass::LinkLocal,
        (224..=239, _) => AddressClass::Multicast,
        _ if ip == Ipv4Addr::BROADCAST => AddressClass::Broadcast,
        (240..=255, _) => AddressClass::Reserved,
        _ => return None,
    })
}

/// NAT64's well-known prefix `64:ff9b::/96` (RFC 6052).
const NAT64_PREFIX: [u16; 6] = [0x64, 0xff9b, 0, 0, 0, 0];

fn classify_v6(ip: Ipv6Addr) -> Option<AddressClass> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let s = ip.segments();
    if s[..6] == NAT64_PREFIX {
        let [.., a, b, c, d] = ip.octets();
        return classify_v4(Ipv4Addr::new(a, b, c, d));
    }
    Some(match s[0] {
        _ if ip.is_unspecified() => AddressClass::Unspecified,
        _ if ip.is_loopback() => AddressClass::Loopback,
        // The deprecated IPv4-compatible `::a.b.c.d` (RFC 4291): no forge is reached that way.
        _ if s[..6] == [0; 6] => AddressClass::Reserved,
        0xfe80..=0xfebf => AddressClass::LinkLocal,
        0xfec0..=0xfeff => AddressClass::SiteLocal,
        0xfc00..=0xfdff => AddressClass::UniqueLocal,
        0xff00..=0xffff => AddressClass::Multicast,
        _ => return None,
    })
}

/// Whether forge calls may reach private, loopback and link-local addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddressPolicy {
    /// Any address (the default): in-cluster forges work.
    #[default]
    AllowPrivate,
    /// Only addresses [`classify`] finds no class for: names are resolved by the operator and
    /// such addresses dropped, literals naming one refused.
    RefusePrivate,
}

impl AddressPolicy {
    /// The policy of the setting's value.
    pub fn from_refuse(refuse: bool) -> AddressPolicy {
        if refuse {
            AddressPolicy::RefusePrivate
        } else {
            AddressPolicy::AllowPrivate
        }
    }

    /// The class that makes `ip` refused under this policy; `None` when it may be reached.
    pub fn refuses(self, ip: IpAddr) -> Option<AddressClass> {
        match self {
            AddressPolicy::AllowPrivate => None,
            AddressPolicy::RefusePrivate => classify(ip),
        }
    }

    /// The class that makes the URL host `host` refused when it is an IP literal (`10.0.0.1`,
    /// `[::1]`, as [`super::url_host`] gives it); names are judged after resolution instead.
    pub fn refuses_literal(self, host: &str) -> Option<AddressClass> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        self.refuses(bare.parse().ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an IP address")
    }

    #[test]
    fn classes_of_addresses() {
        use AddressClass::*;
        for (addr, class) in [
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("::", Some(Unspecified)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.0.9", Some(Loopback)),
            ("::1", Some(Loopback)),
            ("10.0.0.1", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("192.168.1.1", Some(Private)),
            ("100.64.0.1", Some(SharedAddressSpace)),
            ("100.100.100.200", Some(SharedAddressSpace)),
            ("100.127.255.255", Some(SharedAddressSpace)),
            ("169.254.169.254", Some(LinkLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("fec0::1", Some(SiteLocal)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd00:ec2::254", Some(UniqueLocal)),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("ff02::1", Some(Multicast)),
            ("255.255.255.255", Some(Broadcast)),
            ("240.0.0.1", Some(Reserved)),
            // IPv4 inside IPv6 is judged as the IPv4 address.
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
            ("64:ff9b::8c52:7904", None),
            ("::ffff:140.82.121.4", None),
            ("::a9fe:a9fe", Some(Reserved)),
            // Public addresses, and the edges of the ranges above.
            ("140.82.121.4", None),
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("169.253.255.255", None),
            ("192.169.0.1", None),
            ("223.255.255.255", None),
            ("2606:50c0:8000::153", None),
            ("2001:4860:4860::8888", None),
            ("fbff::1", None),
        ] {
            assert_eq!(classify(ip(addr)), class, "{addr}");
        }
    }

    #[test]
    fn the_policy_refuses_only_when_on() {
        let metadata = ip("169.254.169.254");
        assert_eq!(AddressPolicy::default(), AddressPolicy::AllowPrivate);
        assert_eq!(AddressPolicy::AllowPrivate.refuses(metadata), None);
        assert_eq!(
            AddressPolicy::RefusePrivate.refuses(metadata),
            Some(AddressClass::LinkLocal)
        );
        assert_eq!(AddressPolicy::RefusePrivate.refuses(ip("140.82.121.4")), None);
        assert_eq!(AddressPolicy::from_refuse(true), AddressPolicy::RefusePrivate);
        assert_eq!(AddressPolicy::from_refuse(false), AddressPolicy::AllowPrivate);
    }

    #[test]
    fn literals_in_url_hosts() {
        let p = AddressPolicy::RefusePrivate;
        assert_eq!(p.refuses_literal("[::1]"), Some(AddressClass::Loopback));
        assert_eq!(p.refuses_literal("127.0.0.1"), Some(AddressClass::Loopback));
        assert_eq!(
            p.refuses_literal("[::ffff:a9fe:a9fe]"),
            Some(AddressClass::LinkLocal)
        );
        assert_eq!(
            p.refuses_literal("localhost"),
            None,
            "names are judged once resolved"
        );
        assert_eq!(p.refuses_literal("140.82.121.4"), None);
        assert_eq!(AddressPolicy::AllowPrivate.refuses_literal("[::1]"), None);
    }
}
