"""The agent directory shared with pi 1.6.0, without pi itself (issue 17 §4).

pi's entries in the shared ``settings.json`` are skipped quietly; ``auth.json`` is
changed under pi's lock directory (`pi_lock`) and read as pi writes it (in place,
possibly with a byte-order mark, ``api_key`` entries without ``key``). The same
behaviour against the real pi: tests/e2e/test_agent_dir_shared_with_pi16.py.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from pi_sandbox.pi_lock import PiLockError, PiLockTimeout, lock_path_for, pi_lock
from pi_sandbox.resources.settings_lists import settings_paths
from pi_sandbox.supervisor.extensions.extension_discovery import discover_extensions
from pi_sandbox.supervisor.providers import auth_store
from pi_sandbox.supervisor.providers.auth_store import (
    AuthStoreError,
    read_auth,
    resolve_key,
    store_api_key,
)
from pi_sandbox.supervisor.providers.models_config import ModelsConfigError, read_models_file

# -- settings.json ---------------------------------------------------------------------


def _settings(tmp_path: Path, entries: list[str]) -> Path:
    path = tmp_path / "agent" / "settings.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"extensions": entries}))
    return path


def test_pi_s_builtin_extension_entries_and_ts_patterns_are_skipped_without_a_notice(tmp_path):
    settings = _settings(
        tmp_path,
        ["builtin:mcp", "-builtin:codemode", "+builtin:tool-search", "!legacy/*.ts", "-x.js"],
    )
    notices: list[str] = []
    assert settings_paths(settings, notices) == []
    assert notices == []


def test_a_pattern_that_could_name_a_python_extension_gets_a_notice_it_is_not_applied(tmp_path):
    settings = _settings(tmp_path, ["-extensions/old.py"])
    notices: list[str] = []
    assert settings_paths(settings, notices) == []
    [notice] = notices
    assert "extensions[0]" in notice and "which pi-sandbox does not apply" in notice


def test_pi_extension_files_listed_or_in_extensions_are_skipped_quietly(tmp_path):
    agent = tmp_path / "agent"
    shared = tmp_path / "shared"
    (agent / "extensions" / "tspkg").mkdir(parents=True)
    shared.mkdir()
    (agent / "extensions" / "a.ts").write_text("export default () => {}")
    (agent / "extensions" / "b.js").write_text("module.exports = () => {}")
    (agent / "extensions" / "tspkg" / "index.ts").write_text("export default () => {}")
    (agent / "extensions" / "tspkg" / "package.json").write_text('{"pi": {}}')
    (agent / "extensions" / "mine.py").write_text("def extension(pi): pass\n")
    (shared / "listed.ts").write_text("export default () => {}")
    (shared / "listed.py").write_text("def extension(pi): pass\n")
    _settings(tmp_path, [str(shared), str(shared / "listed.ts"), "builtin:mcp"])
    (tmp_path / "cwd").mkdir()
    found, notices = discover_extensions(
        cwd=tmp_path / "cwd",
        agent_dir=agent,
        cli_paths=[],
        no_extensions=False,
        project_trust=None,
        entry_points=lambda: [],
    )
    assert [s.path.name for s in found] == ["mine.py", "listed.py"]
    assert notices == []


# -- pi's lock -------------------------------------------------------------------------


def test_the_lock_is_pi_s_directory_beside_the_resolved_file_and_is_removed_after(tmp_path):
    real = tmp_path / "dotfiles" / "auth.json"
    real.parent.mkdir()
    real.write_text("{}")
    (tmp_path / "auth.json").symlink_to(real)
    lock = lock_path_for(tmp_path / "auth.json")
    assert lock == real.with_name("auth.json.lock")
    with pi_lock(lock, timeout=1, stale=30):
        assert lock.is_dir()
    assert not lock.exists()


def test_a_live_lock_makes_us_wait_and_a_stale_one_is_taken(tmp_path):
    lock = tmp_path / "auth.json.lock"
    lock.mkdir()
    with (
        pytest.raises(PiLockTimeout, match="locked by another process"),
        pi_lock(lock, timeout=0.2, stale=30),
    ):
        pass
    old = time.time() - 31
    os.utime(lock, (old, old))  # its holder died 31 s ago
    with pi_lock(lock, timeout=0.2, stale=30):
        pass
    assert not lock.exists()


def test_a_lock_that_is_not_a_directory_is_an_error_naming_it(tmp_path):
    lock = tmp_path / "auth.json.lock"
    lock.write_text("")
    with (
        pytest.raises(PiLockError, match=r"auth\.json\.lock: exists and is not a directory"),
        pi_lock(lock, timeout=0.2, stale=30),
    ):
        pass


# -- auth.json -------------------------------------------------------------------------


def test_a_login_waits_for_pi_s_lock_and_keeps_the_key_pi_wrote_meanwhile(tmp_path):
    agent = tmp_path / "agent"
    store_api_key(agent, "openai", "k1")
    lock = agent / "auth.json.lock"
    lock.mkdir()  # pi holds it, and writes its key before releasing

    def pi_writes_then_releases() -> None:
        time.sleep(0.3)
        data = json.loads((agent / "auth.json").read_text())
        data["anthropic"] = {"type": "api_key", "key": "k-pi"}
        (agent / "auth.json").write_text(json.dumps(data, indent=2))
        os.rmdir(lock)

    pi = threading.Thread(target=pi_writes_then_releases)
    pi.start()
    store_api_key(agent, "google", "k3")
    pi.join()
    assert set(read_auth(agent)) == {"openai", "anthropic", "google"}
    assert sorted(p.name for p in agent.iterdir()) == ["auth.json"]


def test_a_read_racing_pi_s_in_place_write_waits_for_the_lock_instead_of_failing(tmp_path):
    agent = tmp_path / "agent"
    store_api_key(agent, "openai", "k1")
    auth = agent / "auth.json"
    lock = agent / "auth.json.lock"
    lock.mkdir()
    auth.write_text('{\n  "openai": {"type": "api_')  # pi's write, cut short

    def pi_finishes() -> None:
        time.sleep(0.3)
        auth.write_text('{"openai": {"type": "api_key", "key": "k2"}}')
        os.rmdir(lock)

    pi = threading.Thread(target=pi_finishes)
    pi.start()
    assert read_auth(agent) == {"openai": {"type": "api_key", "key": "k2"}}
    pi.join()
    # Without a writer, malformed stays an error naming the file (not its content).
    auth.write_text('{"openai": "sk-secret')
    with pytest.raises(AuthStoreError, match=r"auth\.json: not valid JSON") as raised:
        read_auth(agent)
    assert "sk-secret" not in str(raised.value)


def test_pi_s_byte_order_mark_and_env_only_api_key_entries_are_read(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    auth = agent / "auth.json"
    data = {
        "cloudflare-ai-gateway": {"type": "api_key", "env": {"CLOUDFLARE_ACCOUNT_ID": "a"}},
        "openai": {"type": "api_key", "key": "k1"},
    }
    auth.write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode())
    auth.chmod(0o600)
    assert read_auth(agent) == data

    class Provider:
        id = "cloudflare-ai-gateway"
        api_key = None
        env_keys = ("CLOUDFLARE_API_KEY",)

    key, source = resolve_key(Provider, cli_key=None, auth=data)  # type: ignore[arg-type]
    assert key is None and source.kind in ("none", "env")


def test_a_symlinked_auth_json_stays_a_symlink_as_pi_keeps_it(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir(mode=0o700)
    real = tmp_path / "dotfiles" / "auth.json"
    real.parent.mkdir(mode=0o700)
    real.write_text("{}")
    real.chmod(0o600)
    (agent / "auth.json").symlink_to(real)
    store_api_key(agent, "openai", "k1")
    assert (agent / "auth.json").is_symlink()
    assert json.loads(real.read_text())["openai"]["key"] == "k1"
    assert not (tmp_path / "dotfiles" / "auth.json.lock").exists()


def test_our_old_flock_file_is_removed_at_the_next_login(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir(mode=0o700)
    (agent / ".auth.json.lock").write_text("")
    store_api_key(agent, "openai", "k1")
    assert sorted(p.name for p in agent.iterdir()) == ["auth.json"]
    assert auth_store.AUTH_LOCK_STALE_S == 30.0  # pi's stale for its auth writes


# -- models.json -----------------------------------------------------------------------


def test_a_models_json_with_pi_s_comments_and_trailing_commas_is_read(tmp_path):
    path = tmp_path / "models.json"
    path.write_text(
        "{\n"
        "  // my local server\n"
        '  "providers": {\n'
        '    "local": {"baseUrl": "http://127.0.0.1:1/v1", "api": "openai-completions",\n'
        '      "models": [{"id": "m // not a comment", },],},\n'
        "  },\n"
        "}\n"
    )
    data = read_models_file(path)
    assert data is not None
    assert data["providers"]["local"]["models"] == [{"id": "m // not a comment"}]
    path.write_text('{"providers": {"local": }}')
    with pytest.raises(ModelsConfigError, match="not valid JSON"):
        read_models_file(path)


# -- the sandbox ------------------------------------------------------------------------


def test_pi_s_mcp_json_and_models_store_are_masked_like_our_agent_files(tmp_path):
    from pi_sandbox.sandbox.profile import worker_profile
    from pi_sandbox.sandbox.settings import SandboxSettings

    home = Path(os.path.realpath(tmp_path)) / "home"
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True)
    (tmp_path / "proj").mkdir()
    profile = worker_profile(
        "tool",
        workspace=tmp_path / "proj",
        home=home,
        agent_dir=agent,
        settings=SandboxSettings(),
        proxy_socket=str(tmp_path / "egress.sock"),
    )
    for name in ("mcp.json", "models-store.json", "auth.json", "models.json"):
        assert str(agent / name) in profile.deny_read


# -- sessionDir ------------------------------------------------------------------------


def test_the_session_directory_follows_pi_s_precedence_env_then_user_settings(tmp_path):
    from pi_sandbox.supervisor.sessions.startup import choose_session, configured_session_dir

    agent = tmp_path / "agent"
    cwd = tmp_path / "proj"
    (cwd / ".pi").mkdir(parents=True)
    agent.mkdir()
    assert configured_session_dir(agent, cwd, {}) is None
    (agent / "settings.json").write_text(json.dumps({"sessionDir": "../shared-sessions"}))
    assert configured_session_dir(agent, cwd, {}) == tmp_path / "shared-sessions"
    env = {"PI_CODING_AGENT_SESSION_DIR": str(tmp_path / "from-env")}
    assert configured_session_dir(agent, cwd, env) == tmp_path / "from-env"
    # A project's sessionDir is not read (pi reads it before trust; we do not).
    (agent / "settings.json").write_text("{}")
    (cwd / ".pi" / "settings.json").write_text(json.dumps({"sessionDir": "/tmp/elsewhere"}))
    assert configured_session_dir(agent, cwd, {}) is None
    (agent / "settings.json").write_text(json.dumps({"sessionDir": 7}))
    assert configured_session_dir(agent, cwd, {}) is None
    (agent / "settings.json").write_text(json.dumps({"sessionDir": "~/s"}))
    choice = choose_session(agent_dir=agent, cwd=cwd, env={"HOME": str(tmp_path)})
    assert choice.directory == Path(os.path.expanduser("~/s"))  # --session-dir still wins:
    choice = choose_session(agent_dir=agent, cwd=cwd, session_dir=str(tmp_path / "cli"), env={})
    assert choice.directory == tmp_path / "cli"
