"""The SSRF guard. No test here sends a packet anywhere but loopback: refusals happen before connecting, and
`_connect` is replaced by a tripwire so a regression fails loudly instead of reaching a private network."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from tickwork.adapters.targets import http as http_adapter
from tickwork.adapters.targets.http import HttpInvoker
from tickwork.adapters.targets.ssrf import IPAddress, blocked_reason, parse_networks
from tickwork.domain.models import Target

from .conftest import EPOCH, SECRET, RecordingServer, invocation


def guarded_invoker(
    allow_loopback: bool = False, allowed_networks: tuple[str, ...] = (), **kw: object
) -> HttpInvoker:
    return HttpInvoker(
        SECRET,
        clock_epoch=lambda: float(EPOCH),
        allow_loopback=allow_loopback,
        allowed_networks=allowed_networks,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def no_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    def tripwire(*args: object) -> socket.socket:
        raise AssertionError(f"the guard let a connection through: {args}")

    monkeypatch.setattr(http_adapter, "_connect", tripwire)


REFUSED_URLS = [
    pytest.param("http://127.0.0.1:{port}/", id="ipv4-loopback"),
    pytest.param("http://127.1.2.3:{port}/", id="ipv4-loopback-range"),
    pytest.param("http://localhost:{port}/", id="localhost-name", marks=pytest.mark.network),  # resolved
    pytest.param("http://[::1]:{port}/", id="ipv6-loopback"),
    pytest.param("http://169.254.169.254/latest/meta-data/", id="instance-metadata"),
    pytest.param("http://[fd00:ec2::254]/latest/meta-data/", id="instance-metadata-ipv6"),
    pytest.param("http://10.0.0.1/", id="private-10"),
    pytest.param("http://172.16.5.4/", id="private-172"),
    pytest.param("http://192.168.1.1/", id="private-192"),
    pytest.param("http://100.64.0.1/", id="carrier-grade-nat"),
    pytest.param("http://224.0.0.1/", id="multicast"),
    pytest.param("http://240.0.0.1/", id="reserved"),
    pytest.param("http://0.0.0.0:{port}/", id="unspecified-reaches-localhost-on-linux"),
    pytest.param("http://[::]:{port}/", id="ipv6-unspecified"),
    pytest.param("http://[::ffff:127.0.0.1]:{port}/", id="ipv4-mapped-loopback"),
    pytest.param("http://[::ffff:10.0.0.1]/", id="ipv4-mapped-private"),
    pytest.param("http://[fe80::1]/", id="ipv6-link-local"),
    pytest.param("http://[fc00::1]/", id="ipv6-unique-local"),
    pytest.param("http://[ff02::1]/", id="ipv6-multicast"),
    pytest.param("http://[64:ff9b::a9fe:a9fe]/", id="nat64-of-metadata"),
    pytest.param("http://[2002:a00:1::]/", id="6to4-of-private"),
]


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_internal_addresses_are_refused_before_connecting(
    server: RecordingServer, no_connect: None, url: str
) -> None:
    target = Target("http", {"url": url.format(port=server.port)})

    result = guarded_invoker().invoke(target, invocation())

    assert (result.ok, result.retryable, result.status) == (False, False, "SSRFBlocked"), result
    assert server.connections == 0 and server.requests == []


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://169.254.169.254/", id="metadata"),
        pytest.param("http://10.0.0.1/", id="private"),
        pytest.param("http://0.0.0.0:{port}/", id="unspecified"),
        pytest.param("http://[2002:7f00:1::]/", id="6to4-of-loopback-is-not-loopback"),
    ],
)
def test_local_mode_allows_loopback_only(server: RecordingServer, no_connect: None, url: str) -> None:
    result = guarded_invoker(allow_loopback=True).invoke(
        Target("http", {"url": url.format(port=server.port)}), invocation()
    )

    assert result.status == "SSRFBlocked"
    assert server.connections == 0


def test_a_name_with_any_internal_address_is_refused(no_connect: None) -> None:
    """DNS answering one public and one private address: the private one could be the one connected to."""

    def resolver(host: str, port: int) -> list[tuple[int, IPAddress]]:
        return [
            (socket.AF_INET, ipaddress.IPv4Address("93.184.216.34")),
            (socket.AF_INET, ipaddress.IPv4Address("10.1.2.3")),
        ]

    result = guarded_invoker(resolver=resolver).invoke(
        Target("http", {"url": "https://rebind.example.com/hook"}), invocation()
    )

    assert result.status == "SSRFBlocked"
    assert "10.1.2.3" in result.detail


@pytest.mark.network  # the call reaches the loopback server
def test_allowed_networks_open_a_chosen_range(server: RecordingServer) -> None:
    invoker = guarded_invoker(allowed_networks=("127.0.0.0/8",))

    result = invoker.invoke(Target("http", {"url": server.url()}), invocation())

    assert result.ok, result
    assert len(server.requests) == 1


def test_allowed_networks_do_not_open_other_ranges(server: RecordingServer, no_connect: None) -> None:
    invoker = guarded_invoker(allowed_networks=("10.20.0.0/16",))

    result = invoker.invoke(Target("http", {"url": "http://10.21.0.1/"}), invocation())

    assert result.status == "SSRFBlocked"


def test_a_bad_cidr_fails_at_construction() -> None:
    with pytest.raises(ValueError):
        guarded_invoker(allowed_networks=("10.0.0.0/33",))


@pytest.mark.parametrize(
    ("address", "allow_loopback", "allowed", "blocked"),
    [
        ("8.8.8.8", False, (), False),
        ("2606:4700:4700::1111", False, (), False),
        ("127.0.0.1", False, (), True),
        ("127.0.0.1", True, (), False),
        ("::1", True, (), False),
        ("::ffff:127.0.0.1", True, (), False),
        ("::ffff:8.8.8.8", False, (), False),
        ("::ffff:169.254.169.254", True, (), True),
        ("169.254.169.254", True, (), True),
        ("0.0.0.0", True, (), True),
        ("::", True, (), True),
        ("::127.0.0.1", False, (), True),  # deprecated IPv4-compatible form: reserved ::/8
        ("64:ff9b::7f00:1", True, (), True),  # NAT64 of loopback is a remote gateway, not this host
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", False, (), True),  # Teredo wrapping 10.0.0.1
        ("10.0.0.1", False, ("10.0.0.0/8",), False),
        ("::ffff:10.0.0.1", False, ("10.0.0.0/8",), False),
        ("10.0.0.1", False, ("fd00::/8",), True),
    ],
)
def test_blocked_reason(address: str, allow_loopback: bool, allowed: tuple[str, ...], blocked: bool) -> None:
    reason = blocked_reason(
        ipaddress.ip_address(address), allow_loopback=allow_loopback, allowed_networks=parse_networks(allowed)
    )

    assert (reason is not None) is blocked, reason


@pytest.mark.parametrize("mapped", ["::ffff:169.254.169.254", "::ffff:127.0.0.1", "::ffff:10.0.0.1"])
def test_an_ipv6_allow_list_does_not_open_ipv4_mapped_addresses(mapped: str) -> None:
    """`::/0` opens IPv6 ranges; a mapped address is its IPv4 address and is matched as IPv4 only."""
    everything_v6 = [ipaddress.ip_network("::/0")]
    assert blocked_reason(ipaddress.ip_address(mapped), allowed_networks=everything_v6) is not None
    # Allowing the IPv4 range itself still works for its mapped form.
    v4 = [ipaddress.ip_network(f"{mapped.removeprefix('::ffff:')}/32")]
    assert blocked_reason(ipaddress.ip_address(mapped), allowed_networks=v4) is None
