"""The retry layer's pure parts: ``Retry-After`` parsing, the backoff schedule and the
settings files (pi's names and defaults, pi docs settings.md "Network and retries")."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest

from pi_sandbox.errors import ProviderError
from pi_sandbox.supervisor.providers.retry import (
    AutoRetry,
    RetrySettings,
    load_retry_settings,
    parse_retry_after,
)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": " 1.5 "}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),  # the finer one wins
        ({"retry-after-ms": "soon", "Retry-After": "3"}, 3.0),
        ({"Retry-After": "-1"}, None),
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": "tomorrow"}, None),
        ({}, None),
    ],
)
def test_retry_after_reads_seconds_and_milliseconds(headers, expected) -> None:
    assert parse_retry_after(httpx.Headers(headers)) == expected


def test_retry_after_reads_an_http_date_relative_to_now() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    later = format_datetime(datetime(2026, 1, 1, 12, 0, 7, tzinfo=UTC), usegmt=True)
    earlier = format_datetime(datetime(2026, 1, 1, 11, 0, 0, tzinfo=UTC), usegmt=True)

    assert parse_retry_after(httpx.Headers({"Retry-After": later}), now=now) == 7.0
    assert parse_retry_after(httpx.Headers({"Retry-After": earlier}), now=now) == 0.0


def test_the_backoff_doubles_with_jitter_is_capped_and_never_below_the_servers_ask() -> None:
    retry = AutoRetry(RetrySettings(base_delay_ms=2000, max_delay_ms=5000), rng=random.Random(1))

    first, second, third = (retry.delay_s(n, None) for n in (1, 2, 3))

    assert 1.6 <= first <= 2.4 and 3.2 <= second <= 4.8
    assert third == 5.0  # 8 s ± 20 % capped at maxAgentDelayMs
    assert retry.delay_s(1, 4.5) == 4.5
    assert retry.delay_s(1, 5.5) is None  # longer than the maximum: not retried


def test_defaults_are_pis() -> None:
    settings, notices = load_retry_settings(Path("/nonexistent-agent-dir"), environ={})

    assert settings == RetrySettings(True, 3, 2000, 60000, 300000) and notices == []
    assert settings.idle_timeout_s == 300.0


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_user_then_project_settings_apply_with_pis_names(tmp_path: Path) -> None:
    agent, cwd = tmp_path / "agent", tmp_path / "work"
    _write(agent / "settings.json", {"retry": {"maxRetries": 5, "baseDelayMs": 100}})
    _write(
        cwd / ".pi" / "settings.json",
        {
            "retry": {"enabled": False, "maxDelayMs": 1, "maxAgentDelayMs": 7000},
            "httpIdleTimeoutMs": 0,
        },
    )

    user_only, _ = load_retry_settings(agent, environ={})
    both, notices = load_retry_settings(agent, cwd, environ={})

    assert (user_only.max_retries, user_only.base_delay_ms, user_only.enabled) == (5, 100, True)
    assert both == RetrySettings(False, 5, 100, 7000, None) and notices == []


def test_a_bad_value_is_a_notice_naming_file_and_key_and_the_file_is_skipped(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "agent"
    _write(agent / "settings.json", {"retry": {"maxRetries": "many", "baseDelayMs": 1}})

    settings, notices = load_retry_settings(agent, environ={})

    assert settings == RetrySettings()
    assert len(notices) == 1
    assert str(agent / "settings.json") in notices[0] and "retry.maxRetries" in notices[0]


def test_the_idle_timeout_takes_disabled_and_an_environment_override(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    _write(agent / "settings.json", {"httpIdleTimeoutMs": "disabled"})

    disabled, _ = load_retry_settings(agent, environ={})
    overridden, _ = load_retry_settings(agent, environ={"PI_HTTP_IDLE_TIMEOUT_MS": "1500"})
    bad, notices = load_retry_settings(agent, environ={"PI_HTTP_IDLE_TIMEOUT_MS": "x"})

    assert disabled.idle_timeout_ms is None
    assert overridden.idle_timeout_s == 1.5
    assert bad.idle_timeout_ms is None and "PI_HTTP_IDLE_TIMEOUT_MS" in notices[0]


async def test_a_provider_error_without_attributes_is_not_retried() -> None:
    # The scripted provider's errors (and any provider that sets nothing) are final.
    calls = []
    events = []

    async def attempt() -> None:
        calls.append(1)
        raise ProviderError("script exhausted")

    async def emit(event: dict) -> None:
        events.append(event)

    with pytest.raises(ProviderError, match=r"^script exhausted$"):
        await AutoRetry(RetrySettings(base_delay_ms=1)).run(attempt, emit)
    assert calls == [1] and events == []


def test_a_file_that_is_not_json_keeps_the_defaults_without_a_second_notice(
    tmp_path: Path,
) -> None:
    # The extension loader reports a broken settings.json; saying it twice is noise.
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "settings.json").write_text("{not json")

    assert load_retry_settings(agent, environ={}) == (RetrySettings(), [])
