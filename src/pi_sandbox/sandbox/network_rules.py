"""Allow-listed network egress: host patterns and the decision for one destination.

A sandbox has no network interface but its own loopback (DESIGN §6); the only way
out is the supervisor's egress proxy, which asks `NetworkRules.decide` about every
connection. This module is that decision, and nothing else: pure, stdlib only, no
DNS and no sockets. The proxy adds the checks that need the network (resolving the
name and refusing non-public addresses reached through a wildcard).

Pattern grammar (`validate_host_pattern`)::

    pattern   = host [ ":" port ]
    host      = "localhost" | domain | "*." domain | ipv4 | "[" ipv6 "]"
    domain    = at least two labels of letters, digits and inner hyphens
    port      = 1 to 65535

Matching (`NetworkRules.decide`):

- the destination host is normalised: lower-cased, one trailing dot dropped,
  non-ASCII names IDNA-encoded (the stdlib ``idna`` codec, IDNA 2003);
- the deny list is checked first and wins over the allow list; a deny entry without
  a port denies every port;
- ``*.example.com`` matches ``a.example.com`` and ``a.b.example.com``, never
  ``example.com`` itself;
- an allow entry without a port allows ports 80 and 443 only; ``host:port`` allows
  exactly that port;
- a destination written as an IP address is allowed only by an entry naming the same
  address. Numeric spellings a C resolver would accept as IPv4 (``127.1``,
  ``0x7f.0.0.1``, ``2130706433``, ``017.0.0.1``) are never taken for domain names:
  they are invalid, hence denied;
- an empty allow list denies everything (no network).

Wildcards cannot stand for a whole top-level domain (``*.com``), but this module has
no public-suffix list: ``*.co.uk`` is accepted.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

__all__ = [
    "DEFAULT_PORTS",
    "NetworkDecision",
    "NetworkRules",
    "is_public_address",
    "normalize_host",
    "pattern_host",
    "split_authority",
    "validate_host_pattern",
]

DEFAULT_PORTS = (80, 443)
"""The ports an allow entry without ``:port`` allows (HTTP and HTTPS)."""

_MAX_NAME_LENGTH = 253
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# WHATWG URL and glibc both read a name whose last label is a number as IPv4.
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
_PORT = re.compile(r"[0-9]{1,5}")

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_HostKind = Literal["name", "ip"]


# --- host names ----------------------------------------------------------------------------


def _loose_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """What ``inet_aton`` would make of ``text`` (``127.1`` → 127.0.0.1), or None."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers = []
    for part in parts:
        try:
            if part.startswith("0x"):
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part, 8))
            else:
                numbers.append(int(part, 10))
        except ValueError:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last
    for index, n in enumerate(head):
        value |= n << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _ipv4_literal(text: str) -> ipaddress.IPv4Address:
    """Parse a name whose last label is numeric: canonical dotted quad or ValueError."""
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        pass
    loose = _loose_ipv4(text)
    if loose is not None:
        raise ValueError(f"{text!r} is a non-canonical IPv4 address (it means {loose})")
    raise ValueError(f"{text!r} is neither a host name nor an IPv4 address")


def _ipv6_literal(text: str) -> ipaddress.IPv6Address:
    if "%" in text:
        raise ValueError(f"{text!r}: IPv6 zone identifiers are not supported")
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a valid IPv6 address") from None


def _to_ascii(name: str) -> str:
    if name.isascii():
        return name.lower()
    try:
        return name.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError(f"{name!r} is not a valid internationalised domain name: {exc}") from None


def _check_labels(name: str) -> list[str]:
    if not name:
        raise ValueError("the host name is empty")
    if len(name) > _MAX_NAME_LENGTH:
        raise ValueError(f"host name longer than {_MAX_NAME_LENGTH} characters")
    labels = name.split(".")
    if "" in labels:
        raise ValueError(f"{name!r} has an empty label")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise ValueError(
                f"{name!r}: label {label!r} may hold only letters, digits and inner hyphens"
                " (at most 63 characters)"
            )
    return labels


def _classify_host(host: str) -> tuple[_HostKind, str | _IPAddress]:
    """Normalise a destination host: ``("name", "example.com")`` or ``("ip", address)``."""
    if not isinstance(host, str):
        raise TypeError(f"host must be a str, not {type(host).__name__}")
    if host.startswith("[") and host.endswith("]"):
        return "ip", _ipv6_literal(host[1:-1])
    if ":" in host:
        return "ip", _ipv6_literal(host)
    name = _to_ascii(host)
    if name.endswith("."):
        name = name[:-1]
    if not name:
        raise ValueError("the host name is empty")
    if _NUMERIC_LABEL.fullmatch(name.rsplit(".", 1)[-1]):
        return "ip", _ipv4_literal(name)
    _check_labels(name)
    return "name", name


def normalize_host(host: str) -> str:
    """The canonical form of a destination host, as `NetworkRules.decide` compares it.

    Args:
        host: a host name (any case, optional trailing dot, Unicode allowed), an IPv4
            address in dotted-quad form, or an IPv6 address with or without brackets.

    Returns:
        The lower-case ASCII name (IDNA-encoded), or the compressed IP address without
        brackets (``"::1"``).

    Raises:
        ValueError: the host is not a valid name or IP address; this includes IPv4 in
            any spelling but the canonical dotted quad (``127.1``, ``0x7f.0.0.1``).
        TypeError: ``host`` is not a str.
    """
    _, value = _classify_host(host)
    return str(value)


# --- patterns --------------------------------------------------------------------------------


class _Pattern(NamedTuple):
    text: str
    kind: Literal["name", "wildcard", "ip"]
    host: str | _IPAddress  # the name, the wildcard's suffix (without "*."), or the address
    port: int | None

    def matches_host(self, kind: _HostKind, host: str | _IPAddress) -> bool:
        if self.kind == "ip":
            return kind == "ip" and host == self.host
        if kind != "name":
            return False
        if self.kind == "name":
            return host == self.host
        return isinstance(host, str) and host.endswith("." + str(self.host))


def _parse_port(text: str, pattern: str) -> int:
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise ValueError(f"host pattern {pattern!r}: port {text!r} is not a number from 1 to 65535")
    return int(text)


def _parse_pattern(pattern: str) -> _Pattern:
    if not isinstance(pattern, str):
        raise TypeError(f"a host pattern must be a str, not {type(pattern).__name__}")

    def bad(why: str) -> ValueError:
        return ValueError(f"host pattern {pattern!r}: {why}")

    if not pattern:
        raise bad("empty")
    if pattern != pattern.strip() or any(c.isspace() for c in pattern):
        raise bad("contains whitespace")
    text = pattern.lower()
    if "://" in text:
        raise bad("is a URL; write only the host, e.g. 'example.com' or 'example.com:8443'")
    if "/" in text:
        before = text.split("/", 1)[0].strip("[]")
        try:
            ipaddress.ip_address(before)
        except ValueError:
            raise bad("paths are not allowed; write only the host") from None
        raise bad("CIDR ranges are not supported; list each address")
    if "@" in text:
        raise bad("user information is not allowed; write only the host")

    port: int | None = None
    try:
        host, port_text = split_authority(text)
    except ValueError as exc:
        raise bad(str(exc)) from None
    if port_text is not None:
        port = _parse_port(port_text, pattern)
    if text.startswith("["):
        try:
            address = _ipv6_literal(host)
        except ValueError as exc:
            raise bad(str(exc)) from None
        canonical = f"[{address.compressed}]"
        return _Pattern(_with_port(canonical, port), "ip", address, port)
    text = host

    try:
        text = _to_ascii(text)
    except ValueError as exc:
        raise bad(str(exc)) from None
    if text.endswith(".") and text != ".":
        text = text[:-1]
    if not text:
        raise bad("the host is empty")

    if text.startswith("*."):
        suffix = text[2:]
        if "*" in suffix:
            raise bad("a wildcard is allowed only as a leading '*.'")
        if _NUMERIC_LABEL.fullmatch(suffix.rsplit(".", 1)[-1]):
            raise bad("a wildcard cannot cover IP addresses")
        try:
            labels = _check_labels(suffix)
        except ValueError as exc:
            raise bad(str(exc)) from None
        if len(labels) < 2:
            raise bad("a wildcard cannot cover a whole top-level domain; name the domain")
        return _Pattern(_with_port(text, port), "wildcard", suffix, port)
    if "*" in text:
        raise bad("a wildcard is allowed only as a leading '*.' before a domain")

    if _NUMERIC_LABEL.fullmatch(text.rsplit(".", 1)[-1]):
        try:
            address4 = _ipv4_literal(text)
        except ValueError as exc:
            raise bad(str(exc)) from None
        return _Pattern(_with_port(str(address4), port), "ip", address4, port)
    try:
        labels = _check_labels(text)
    except ValueError as exc:
        raise bad(str(exc)) from None
    if len(labels) < 2 and text != "localhost":
        raise bad("a bare top-level or single-label name is not allowed; name the domain")
    return _Pattern(_with_port(text, port), "name", text, port)


def _with_port(host: str, port: int | None) -> str:
    return host if port is None else f"{host}:{port}"


def split_authority(text: str) -> tuple[str, str | None]:
    """Split ``host``, ``host:port`` or ``[v6]`` / ``[v6]:port`` into (host, port
    text or None). The port is not checked; brackets are removed.

    Raises:
        ValueError: an unclosed ``[``, text after ``]`` that is not ``:port``, or
            an IPv6 address without brackets (more than one ``:``).
    """
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError("unclosed '['")
        host, rest = text[1:close], text[close + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError("unexpected text after ']'")
        return host, rest[1:]
    if text.count(":") > 1:
        raise ValueError("IPv6 addresses must be in brackets, e.g. '[::1]:8080'")
    if ":" in text:
        host, _, port_text = text.partition(":")
        return host, port_text
    return text, None


def pattern_host(pattern: str) -> str:
    """The host part of a valid pattern, canonical: ``"localhost:8080"`` →
    ``"localhost"``, ``"[::1]:80"`` → ``"::1"``, ``"*.example.com"`` →
    ``"*.example.com"``.

    Raises:
        ValueError: ``pattern`` is not a valid host pattern.
    """
    parsed = _parse_pattern(pattern)
    return f"*.{parsed.host}" if parsed.kind == "wildcard" else str(parsed.host)


def validate_host_pattern(pattern: str) -> str:
    """Check one allow/deny entry and return its canonical form.

    Accepted: ``example.com``, ``*.example.com``, ``localhost``, ``10.0.0.1``,
    ``[::1]``, each optionally followed by ``:port`` (1 to 65535). Letters are
    lower-cased, a trailing dot is dropped, Unicode names are IDNA-encoded, IPv6 is
    compressed: ``"API.Example.COM.:8080"`` → ``"api.example.com:8080"``,
    ``"[0:0::1]"`` → ``"[::1]"``.

    Args:
        pattern: the entry as written in the policy.

    Returns:
        The canonical pattern string.

    Raises:
        ValueError: the message names the pattern and why it is refused: empty,
            ``*``, a wildcard over a top-level domain (``*.com``) or not at the start
            (``a.*.com``, ``*foo.com``), a bare top-level or single-label name other
            than ``localhost``, an empty label, a URL scheme, a path, a CIDR range,
            user information, whitespace or other invalid characters, a port outside
            1 to 65535, an unbracketed IPv6 address, a non-canonical IPv4 spelling.
        TypeError: ``pattern`` is not a str.
    """
    return _parse_pattern(pattern).text


# --- decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkDecision:
    """The answer for one destination.

    Attributes:
        allowed: whether a connection may be made.
        rule: the canonical allow or deny entry that decided, or None when no entry
            matched (not listed, empty allow list, invalid destination).
        reason: one human-readable sentence fragment, safe to show to the sandboxed
            program (it names only the destination and the rule).
    """

    allowed: bool
    rule: str | None
    reason: str


def _as_pattern_tuple(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str | bytes):
        raise TypeError(f"NetworkRules.{name} must be a sequence of patterns, not a single string")
    return tuple(value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class NetworkRules:
    """An egress policy: which hosts and ports a sandbox may connect to.

    Both lists are validated and canonicalised on construction (`validate_host_pattern`);
    after that the fields hold the canonical strings. The default, with no entries,
    denies everything.

    Attributes:
        allow: patterns a destination must match to be allowed.
        deny: patterns that deny a destination even when an allow entry matches. A deny
            entry without a port denies every port of that host.

    Raises:
        ValueError: from `validate_host_pattern`, for the first invalid entry.
        TypeError: a list is given as a single string, or holds a non-string.
    """

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    _allow: tuple[_Pattern, ...] = field(init=False, repr=False, compare=False)
    _deny: tuple[_Pattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        allow = tuple(_parse_pattern(p) for p in _as_pattern_tuple("allow", self.allow))
        deny = tuple(_parse_pattern(p) for p in _as_pattern_tuple("deny", self.deny))
        object.__setattr__(self, "allow", tuple(p.text for p in allow))
        object.__setattr__(self, "deny", tuple(p.text for p in deny))
        # Exact entries first, so the proxy learns that an exact entry allowed a host even
        # when a wildcard matches too (exact entries may reach non-public addresses).
        object.__setattr__(self, "_allow", tuple(sorted(allow, key=lambda p: p.kind == "wildcard")))
        object.__setattr__(self, "_deny", deny)

    def decide(self, host: str, port: int) -> NetworkDecision:
        """Decide whether a connection to ``host:port`` may be made.

        Args:
            host: the destination as the client named it: a host name, an IPv4
                address, or an IPv6 address with or without brackets. Normalised as
                `normalize_host` does.
            port: the TCP port, 1 to 65535.

        Returns:
            The decision. Invalid hosts and ports are denied (``rule`` None), never
            raised. When an allow entry matches, ``rule`` is that entry, an exact
            (non-wildcard) one in preference to a wildcard.
        """
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            return NetworkDecision(False, None, f"invalid port {port!r}")
        try:
            kind, value = _classify_host(host)
        except (ValueError, TypeError) as exc:
            return NetworkDecision(False, None, f"invalid host: {exc}")
        for entry in self._deny:
            if entry.matches_host(kind, value) and entry.port in (None, port):
                return NetworkDecision(
                    False, entry.text, f"denied by the deny entry {entry.text!r}"
                )
        if not self._allow:
            return NetworkDecision(False, None, "the allow list is empty (no network access)")
        same_host = None
        for entry in self._allow:
            if not entry.matches_host(kind, value):
                continue
            if (port in DEFAULT_PORTS) if entry.port is None else entry.port == port:
                return NetworkDecision(True, entry.text, f"allowed by {entry.text!r}")
            same_host = same_host or entry
        if same_host is not None:
            hint = (
                " (an entry without a port allows only 80 and 443)"
                if same_host.port is None
                else ""
            )
            return NetworkDecision(False, None, f"port {port} is not allowed for {value}{hint}")
        if kind == "ip":
            return NetworkDecision(
                False, None, f"IP address {value} is not listed (IP destinations must be listed)"
            )
        return NetworkDecision(False, None, f"{value} is not in the allow list")


# --- addresses -------------------------------------------------------------------------------

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def is_public_address(ip: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``ip`` is a globally routable unicast address.

    False for loopback, private (RFC 1918, ULA ``fc00::/7``), shared (``100.64/10``),
    link-local, site-local, unspecified, multicast and reserved addresses, and for IPv6
    addresses embedding such an IPv4 address (IPv4-mapped ``::ffff:10.0.0.1``, 6to4,
    NAT64 ``64:ff9b::/96``).

    Args:
        ip: an address object or its text (an IPv6 zone suffix ``%eth0`` is allowed).

    Raises:
        ValueError: ``ip`` is not an IP address.
    """
    address = ip if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address) else None
    if address is None:
        address = ipaddress.ip_address(str(ip))
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public_address(embedded)
        if address.is_site_local:
            return False
    return not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
        or not address.is_global
    )
