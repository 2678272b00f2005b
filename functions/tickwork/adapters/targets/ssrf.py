"""The SSRF guard: which resolved addresses an HTTP target may connect to.

Job URLs are user input, and the scheduler runs inside a VPC next to the instance metadata service and private
services. The check is on the address actually connected to (after DNS), never on the URL's text: a hostname
can resolve to anything, and can change between validation and the call.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Carrier-grade NAT (RFC 6598): not "private" to Python 3.11's ipaddress, yet internal all the same.
_SHARED_ADDRESS_SPACE = ipaddress.IPv4Network("100.64.0.0/10")
# NAT64 (RFC 6052) embeds an IPv4 address in the low 32 bits; through a NAT64 gateway it reaches that address.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDRs to networks; a bad CIDR is a deployment error and raises ValueError at start-up."""
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, NAT64, 6to4, Teredo), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def blocked_reason(
    address: IPAddress, *, allow_loopback: bool = False, allowed_networks: Sequence[IPNetwork] = ()
) -> str | None:
    """Why connecting to `address` is refused, or None when it is allowed.

    Allowed: globally routable unicast addresses, plus loopback when `allow_loopback` (local mode), plus
    anything inside `allowed_networks` (an operator's explicit choice, e.g. a VPC peer's CIDR).
    """
    # An IPv4-mapped address IS its IPv4 address on a dual-stack socket, so it is matched as that IPv4
    # address only: `::/0` in allowed_networks must not open ::ffff:169.254.169.254. NAT64/6to4/Teredo only
    # route towards the embedded address, so those count for blocking, never allowing.
    same_host: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        same_host = [address.ipv4_mapped]
    for candidate in same_host:
        if any(candidate.version == net.version and candidate in net for net in allowed_networks):
            return None
    if allow_loopback and any(c.is_loopback for c in same_host):
        return None
    # An IPv4-mapped address is judged as its IPv4 address alone (Python 3.11 calls all of ::ffff:0:0/96
    # private, which would wrongly refuse ::ffff:8.8.8.8); the other embeddings must pass as both addresses.
    inner = embedded_ipv4(address)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates: list[IPAddress] = [address.ipv4_mapped]
    else:
        candidates = [address] if inner is None else [address, inner]
    for candidate in candidates:
        reason = _category(candidate)
        if reason is not None:
            return f"{address} is {reason}"
    return None


def _category(address: IPAddress) -> str | None:
    # Order matters only for the message: the most specific name first.
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_private or (
        isinstance(address, ipaddress.IPv4Address) and address in _SHARED_ADDRESS_SPACE
    ):
        return "private"
    if address.is_reserved:
        return "reserved"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    if not address.is_global:
        return "not globally routable"
    return None
