"""Egress rules: host pattern validation and the decision for one destination."""

from __future__ import annotations

import ipaddress

import pytest

from pi_sandbox.sandbox.network_rules import (
    NetworkDecision,
    NetworkRules,
    is_public_address,
    normalize_host,
    pattern_host,
    validate_host_pattern,
)

# --- validate_host_pattern ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "canonical"),
    [
        ("example.com", "example.com"),
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),
        ("api.example.com:8443", "api.example.com:8443"),
        ("*.example.com", "*.example.com"),
        ("*.Example.com:443", "*.example.com:443"),
        ("*.co.uk", "*.co.uk"),
        ("a-b.c-d.example", "a-b.c-d.example"),
        ("xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("bücher.de", "xn--bcher-kva.de"),
        ("*.bücher.de", "*.xn--bcher-kva.de"),
        ("localhost", "localhost"),
        ("localhost:8080", "localhost:8080"),
        ("10.0.0.1", "10.0.0.1"),
        ("10.0.0.1:8080", "10.0.0.1:8080"),
        ("[::1]", "[::1]"),
        ("[::1]:8080", "[::1]:8080"),
        ("[0:0:0:0:0:0:0:1]:80", "[::1]:80"),
        ("[2001:DB8::1]", "[2001:db8::1]"),
        ("example.com:1", "example.com:1"),
        ("example.com:65535", "example.com:65535"),
        ("host1.example.com", "host1.example.com"),
    ],
)
def test_valid_host_patterns_are_returned_in_canonical_form(pattern, canonical):
    assert validate_host_pattern(pattern) == canonical


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("", "empty"),
        ("*", "wildcard"),
        ("*.", "wildcard"),
        ("*.com", "top-level domain"),
        ("*.com:443", "top-level domain"),
        ("*.localhost", "top-level domain"),
        ("com", "bare top-level"),
        ("intranet:8080", "bare top-level"),
        ("a.*.example.com", "leading '*.'"),
        ("*foo.example.com", "leading '*.'"),
        ("foo*.example.com", "leading '*.'"),
        ("*.*.example.com", "leading '*.'"),
        ("example.*", "leading '*.'"),
        ("a..example.com", "empty label"),
        (".example.com", "empty label"),
        ("https://example.com", "URL"),
        ("http://example.com:80", "URL"),
        ("example.com/path", "paths"),
        ("10.0.0.0/8", "CIDR"),
        ("[fd00::]/8", "CIDR"),
        ("ex ample.com", "whitespace"),
        (" example.com", "whitespace"),
        ("exa!mple.com", "letters, digits"),
        ("exa_mple.com", "letters, digits"),
        ("-example.com", "letters, digits"),
        ("example-.com", "letters, digits"),
        ("user@example.com", "user information"),
        ("example.com:0", "1 to 65535"),
        ("example.com:65536", "1 to 65535"),
        ("example.com:", "1 to 65535"),
        ("example.com:http", "1 to 65535"),
        ("example.com:-1", "1 to 65535"),
        (":443", "host is empty"),
        ("::1", "brackets"),
        ("[::1", "unclosed"),
        ("[::1]x", "after ']'"),
        ("[10.0.0.1]", "IPv6"),
        ("[fe80::1%eth0]", "zone"),
        ("127.1", "non-canonical IPv4"),
        ("0x7f.0.0.1", "non-canonical IPv4"),
        ("2130706433", "non-canonical IPv4"),
        ("010.0.0.1", "non-canonical IPv4"),
        ("256.0.0.1", "neither"),
        ("example.123", "neither"),
        ("*.10.0.0.1", "IP addresses"),
        ("a" * 64 + ".com", "63 characters"),
    ],
)
def test_invalid_host_patterns_are_refused_with_a_message_naming_them(pattern, why):
    with pytest.raises(ValueError) as info:
        validate_host_pattern(pattern)
    message = str(info.value)
    assert repr(pattern) in message
    assert why in message


def test_a_pattern_that_is_not_a_string_is_a_type_error():
    with pytest.raises(TypeError):
        validate_host_pattern(443)  # type: ignore[arg-type]


def test_rules_store_canonical_patterns_and_refuse_a_single_string():
    rules = NetworkRules(allow=["Example.com.", "[0::1]:80"], deny=["BAD.example.com"])
    assert rules.allow == ("example.com", "[::1]:80")
    assert rules.deny == ("bad.example.com",)
    with pytest.raises(TypeError):
        NetworkRules(allow="example.com")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"'\*\.com'"):
        NetworkRules(allow=("ok.example.com", "*.com"))


# --- decide ---------------------------------------------------------------------------------

RULES = NetworkRules(
    allow=(
        "example.com",
        "*.example.org",
        "api.service.test:8443",
        "*.wild.test:9000",
        "10.0.0.1:8080",
        "93.184.216.34",
        "[2001:db8::1]:443",
        "localhost:8080",
        "xn--bcher-kva.de",
        "blocked.example.org",
        "*.partly.test",
    ),
    deny=("blocked.example.org", "secret.partly.test:443", "*.inner.partly.test"),
)


@pytest.mark.parametrize(
    ("host", "port", "allowed", "rule"),
    [
        # exact names, default ports
        ("example.com", 443, True, "example.com"),
        ("example.com", 80, True, "example.com"),
        ("EXAMPLE.COM", 443, True, "example.com"),
        ("example.com.", 443, True, "example.com"),
        ("example.com", 8080, False, None),
        ("example.com", 22, False, None),
        ("www.example.com", 443, False, None),
        ("example.com.evil.test", 443, False, None),
        ("notexample.com", 443, False, None),
        # wildcards: subdomains only
        ("a.example.org", 443, True, "*.example.org"),
        ("a.b.example.org", 80, True, "*.example.org"),
        ("example.org", 443, False, None),
        ("aexample.org", 443, False, None),
        ("a.example.org", 8443, False, None),
        ("x.wild.test", 9000, True, "*.wild.test:9000"),
        ("x.wild.test", 443, False, None),
        # explicit ports
        ("api.service.test", 8443, True, "api.service.test:8443"),
        ("api.service.test", 443, False, None),
        ("localhost", 8080, True, "localhost:8080"),
        ("LOCALHOST.", 8080, True, "localhost:8080"),
        ("localhost", 80, False, None),
        # deny first
        ("blocked.example.org", 443, False, "blocked.example.org"),
        ("blocked.example.org", 8443, False, "blocked.example.org"),
        ("secret.partly.test", 443, False, "secret.partly.test:443"),
        ("secret.partly.test", 80, True, "*.partly.test"),
        ("x.inner.partly.test", 443, False, "*.inner.partly.test"),
        ("inner.partly.test", 443, True, "*.partly.test"),
        # IP literals
        ("10.0.0.1", 8080, True, "10.0.0.1:8080"),
        ("10.0.0.1", 443, False, None),
        ("10.0.0.2", 8080, False, None),
        ("93.184.216.34", 443, True, "93.184.216.34"),
        ("127.0.0.1", 8080, False, None),
        ("[2001:db8::1]", 443, True, "[2001:db8::1]:443"),
        ("2001:db8::1", 443, True, "[2001:db8::1]:443"),
        ("[2001:0db8:0:0::1]", 443, True, "[2001:db8::1]:443"),
        ("[::1]", 8080, False, None),
        ("::ffff:10.0.0.1", 8080, False, None),
        # IPv4 spellings that are not domain names
        ("127.1", 8080, False, None),
        ("0x7f.0.0.1", 8080, False, None),
        ("0x7f000001", 8080, False, None),
        ("2130706433", 8080, False, None),
        ("017700000001", 8080, False, None),
        ("10.0.0.01", 8080, False, None),
        ("10.1", 8080, False, None),
        ("167772161", 8080, False, None),
        ("93.184.216.34.", 443, True, "93.184.216.34"),
        # IDNA
        ("bücher.de", 443, True, "xn--bcher-kva.de"),
        ("BÜCHER.de", 443, True, "xn--bcher-kva.de"),
        ("xn--bcher-kva.de", 443, True, "xn--bcher-kva.de"),
        # invalid hosts and ports
        ("", 443, False, None),
        (".", 443, False, None),
        ("a..example.org", 443, False, None),
        ("exa mple.com", 443, False, None),
        ("example.com/", 443, False, None),
        ("[fe80::1%eth0]", 443, False, None),
        ("example.com", 0, False, None),
        ("example.com", 65536, False, None),
    ],
)
def test_decide(host, port, allowed, rule):
    decision = RULES.decide(host, port)
    assert isinstance(decision, NetworkDecision)
    assert (decision.allowed, decision.rule) == (allowed, rule), decision.reason
    assert decision.reason


@pytest.mark.parametrize(
    ("host", "port", "reason_part"),
    [
        ("example.com", 8080, "without a port allows only 80 and 443"),
        ("nowhere.test", 443, "not in the allow list"),
        ("127.0.0.1", 8080, "IP destinations must be listed"),
        ("127.1", 8080, "non-canonical IPv4 address (it means 127.0.0.1)"),
        ("blocked.example.org", 443, "deny entry"),
    ],
)
def test_denials_say_why(host, port, reason_part):
    assert reason_part in RULES.decide(host, port).reason


@pytest.mark.parametrize(("host", "port"), [("example.com", 443), ("127.0.0.1", 80), ("x", 1)])
def test_an_empty_allowlist_denies_everything(host, port):
    decision = NetworkRules().decide(host, port)
    assert not decision.allowed
    assert "empty" in decision.reason


def test_an_exact_entry_wins_over_a_wildcard_that_also_matches():
    rules = NetworkRules(allow=("*.example.com", "api.example.com"))
    assert rules.decide("api.example.com", 443).rule == "api.example.com"
    assert rules.decide("www.example.com", 443).rule == "*.example.com"


def test_decide_never_raises_on_junk():
    for host, port in [(None, 443), ("example.com", "443"), ("example.com", True)]:
        assert not RULES.decide(host, port).allowed  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "normal"),
    [("Example.COM.", "example.com"), ("[::1]", "::1"), ("bücher.de", "xn--bcher-kva.de")],
)
def test_normalize_host(host, normal):
    assert normalize_host(host) == normal


@pytest.mark.parametrize("host", ["127.1", "a..b", "", "[10.0.0.1]"])
def test_normalize_host_refuses_what_decide_denies_as_invalid(host):
    with pytest.raises(ValueError):
        normalize_host(host)


# --- is_public_address ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("8.8.8.8", True),
        ("2606:4700::1111", True),
        ("64:ff9b::808:808", True),
        ("127.0.0.1", False),
        ("127.255.255.254", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("100.64.0.1", False),
        ("169.254.169.254", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fe80::1%eth0", False),
        ("fc00::1", False),
        ("fd12:3456::1", False),
        ("fec0::1", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("2002:7f00:1::", False),
        ("64:ff9b::a00:1", False),
        ("2001:db8::1", False),
    ],
)
def test_is_public_address(address, public):
    assert is_public_address(address) is public
    assert is_public_address(ipaddress.ip_address(address.split("%")[0])) is public


def test_is_public_address_refuses_a_name():
    with pytest.raises(ValueError):
        is_public_address("example.com")


@pytest.mark.parametrize(
    ("pattern", "host"),
    [
        ("localhost:8080", "localhost"),
        ("[::1]:80", "::1"),
        ("*.Example.com", "*.example.com"),
        ("10.0.0.1:9", "10.0.0.1"),
        ("pypi.org", "pypi.org"),
    ],
)
def test_pattern_host_gives_the_canonical_host_part(pattern, host):
    assert pattern_host(pattern) == host
