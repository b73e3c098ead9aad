"""Trust-requiring project resources and the trust store (issue 6 case 7; issue 17 §4:
pi 1.6.0's ``trust.json`` format and lock directory, our records beside it)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pi_sandbox.resources.project_trust import (
    EXTRA_STORE_NAME,
    MAX_STORE_BYTES,
    TrustStore,
    TrustStoreError,
    has_trust_requiring_resources,
    trust_requiring_resources,
)
from pi_sandbox.resources.trust_fingerprint import Fingerprint, ResourceDigest


def test_a_project_without_resources_needs_no_decision(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "README.md").write_text("hi")
    (tmp_path / ".pi").mkdir()  # an empty .pi is nothing to trust
    assert not has_trust_requiring_resources(tmp_path)


@pytest.mark.parametrize(
    "relative",
    [
        ".pi/settings.json",
        ".pi/extensions/evil.py",
        ".pi/skills/x/SKILL.md",
        ".pi/prompts/p.md",
        ".pi/SYSTEM.md",
        ".pi/APPEND_SYSTEM.md",
        ".pi/policy.yaml",
        ".pi/mcp.json",
        ".mcp.json",
        ".claude/settings.json",
    ],
)
def test_each_project_resource_needs_a_decision(tmp_path, relative):
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    assert has_trust_requiring_resources(tmp_path)


def test_a_dangling_symlink_counts_as_present(tmp_path):
    (tmp_path / ".pi").mkdir()
    (tmp_path / ".pi" / "extensions").symlink_to(tmp_path / "nowhere")
    assert trust_requiring_resources(tmp_path) == [tmp_path / ".pi" / "extensions"]


def test_ancestor_agents_skills_count_up_to_the_git_root_but_not_the_users_own(tmp_path):
    home = tmp_path / "home"
    repo = home / "work" / "repo"
    cwd = repo / "packages" / "app"
    cwd.mkdir(parents=True)
    (repo / ".git").mkdir()
    for directory in (repo, home / "work", home):
        (directory / ".agents" / "skills").mkdir(parents=True)
    found = trust_requiring_resources(cwd, home=home)
    # The repository's own counts; above the git root (and the user's own) do not.
    assert found == [repo / ".agents" / "skills"]
    (cwd / ".agents" / "skills").mkdir(parents=True)
    assert trust_requiring_resources(cwd, home=home) == [
        cwd / ".agents" / "skills",
        repo / ".agents" / "skills",
    ]


def test_outside_a_repository_only_the_working_directory_is_looked_at(tmp_path, monkeypatch):
    # (This machine's /tmp may itself be inside a repository: pretend there is none.)
    from pi_sandbox.resources import project_trust

    monkeypatch.setattr(project_trust, "_git_root", lambda start: None)
    (tmp_path / ".agents" / "skills").mkdir(parents=True)
    cwd = tmp_path / "project"
    cwd.mkdir()
    assert not has_trust_requiring_resources(cwd)


def test_case_7_a_decision_applies_below_and_the_nearest_one_wins(tmp_path):
    store = TrustStore(tmp_path / "agent" / "trust.json")
    store.set(Path("/a"), "yes")
    assert store.decision_for(Path("/a/b/c")) == ("yes", Path("/a"))
    store.set(Path("/a/b"), "no")
    assert store.decision_for(Path("/a/b/c")) == ("no", Path("/a/b"))
    assert store.decision_for(Path("/a/x")) == ("yes", Path("/a"))
    assert store.decision_for(Path("/elsewhere")) is None
    assert store.forget(Path("/a/b")) and not store.forget(Path("/a/b"))
    assert store.decision_for(Path("/a/b/c")) == ("yes", Path("/a"))


def records(agent: Path) -> dict:
    return json.loads((agent / EXTRA_STORE_NAME).read_text())["decisions"]


def test_the_store_is_pi_1_6_format_with_our_records_beside_it(tmp_path):
    path = tmp_path / "agent" / "trust.json"
    store = TrustStore(path)
    fingerprint = Fingerprint({"/p/q/.pi/skills": ResourceDigest("ab" * 32, {"": "cd" * 8})})
    store.set(Path("/p/q"), "sandboxed", fingerprint=fingerprint, follow_changes=True)
    store.set(Path("/p/r"), "yes", fingerprint=fingerprint)
    store.set(Path("/p/s"), "no")
    store.save()
    # pi 1.6.0 sees true/false only: sandboxed is false for it (it cannot sandbox).
    assert json.loads(path.read_text()) == {"/p/q": False, "/p/r": True, "/p/s": False}
    ours = records(path.parent)
    assert ours["/p/q"]["decision"] == "sandboxed" and ours["/p/q"]["follow_changes"] is True
    assert ours["/p/q"]["pi"] is False and ours["/p/q"]["saved_at"].endswith("Z")
    for name in ("trust.json", EXTRA_STORE_NAME):
        assert stat.S_IMODE((path.parent / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    loaded = TrustStore.load(path)
    assert loaded.decisions == {"/p/q": "sandboxed", "/p/r": "yes", "/p/s": "no"}
    saved = loaded.saved_for(Path("/p/q/deep"))
    assert saved is not None and saved.fingerprint == fingerprint and saved.follow_changes
    assert sorted(p.name for p in path.parent.iterdir()) == [EXTRA_STORE_NAME, "trust.json"]


def test_follow_changes_is_only_for_sandboxed(tmp_path):
    with pytest.raises(ValueError, match="only a sandboxed"):
        TrustStore(tmp_path / "trust.json").set(Path("/a"), "yes", follow_changes=True)


def test_decisions_pi_saved_apply_and_win_over_a_record_pi_has_overridden(tmp_path):
    path = tmp_path / "trust.json"
    TrustStore.update(path, lambda s: s.set(Path("/a"), "sandboxed"))
    # pi 1.6.0 (its /trust) later saves true for /a and false for /b; null for /c.
    pi_document = json.loads(path.read_text())
    pi_document.update({"/a": True, "/b": False, "/c": None, "relative-key": True})
    path.write_text(json.dumps(pi_document))
    store = TrustStore.load(path)
    assert store.decisions == {"/a": "yes", "/b": "no"}
    a = store.saved(Path("/a"))
    assert a is not None and (a.origin, a.fingerprint) == ("pi", None)
    assert store.decision_for(Path("/c/d")) is None  # null: no decision here
    TrustStore.update(path, lambda s: s.set(Path("/e"), "yes"))
    # pi's own entries are written back as they were; the overridden record is gone.
    assert json.loads(path.read_text()) == {
        "/a": True,
        "/b": False,
        "/c": None,
        "/e": True,
        "relative-key": True,
    }
    assert set(records(tmp_path)) == {"/e"}


def test_a_decision_pi_removed_no_longer_applies(tmp_path):
    path = tmp_path / "trust.json"
    TrustStore.update(path, lambda s: s.set(Path("/a"), "sandboxed"))
    path.write_text("{}")  # pi's "Trust parent folder" deletes the child's key
    assert TrustStore.load(path).decision_for(Path("/a")) is None


# -- migration of our previous format -------------------------------------------------------


def test_our_previous_format_is_read_and_migrated_at_the_first_write_without_losing_entries(
    tmp_path,
):
    path = _private(
        tmp_path / "trust.json",
        json.dumps(
            {
                "version": 1,
                "decisions": {"/y": "yes", "/n": "no", "/s": "sandboxed"},
                "note": {"by": ["me"]},
                "/from-pi": True,  # an older pi-sandbox rewrote pi's store so
            }
        ),
    )
    (tmp_path / "trust.json.lock").write_text("")  # its lock: a regular file
    store = TrustStore.load(path)
    assert store.decisions == {"/y": "yes", "/n": "no", "/s": "sandboxed", "/from-pi": "yes"}
    assert store.saved(Path("/s")).origin == "pi-sandbox (old format)"
    TrustStore.update(path, lambda s: s.set(Path("/new"), "no"))
    assert json.loads(path.read_text()) == {
        "/from-pi": True,
        "/n": False,
        "/new": False,
        "/s": False,
        "/y": True,
    }
    store = TrustStore.load(path)
    assert store.decisions == {
        "/y": "yes",
        "/n": "no",
        "/s": "sandboxed",
        "/from-pi": "yes",
        "/new": "no",
    }
    assert json.loads((tmp_path / EXTRA_STORE_NAME).read_text())["legacy_extra"] == {
        "note": {"by": ["me"]}
    }
    # The old lock file is gone: pi 1.6.0 could not take its lock directory beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == [EXTRA_STORE_NAME, "trust.json"]


@pytest.mark.parametrize("version", ["2", '"1"', "1.0", "true", "null"])
def test_another_version_of_our_previous_format_is_refused_and_left_alone(tmp_path, version):
    path = _private(tmp_path / "trust.json", f'{{"version": {version}, "decisions": {{}}}}')
    before = path.read_bytes()
    with pytest.raises(TrustStoreError, match="version") as error:
        TrustStore.load(path)
    assert str(path) in str(error.value)
    assert repr(json.loads(version)) in str(error.value)
    with pytest.raises(TrustStoreError):
        TrustStore.update(path, lambda s: s.set(Path("/a"), "yes"))
    assert path.read_bytes() == before


def test_our_previous_format_without_a_version_is_version_1(tmp_path):
    path = _private(tmp_path / "trust.json", '{"decisions": {"/a": "no"}}')
    assert TrustStore.load(path).decisions == {"/a": "no"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"/a": "maybe"}', "true, false or null"),
        ('{"/a": 1}', "true, false or null"),
        ('{"decisions": []}', "decisions"),
        ('{"decisions": {"relative/path": "yes"}}', "absolute path"),
        ('{"decisions": {"/a": "maybe"}}', "yes, no, sandboxed"),
        ("[]", "JSON object"),
    ],
)
def test_a_malformed_store_is_an_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "trust.json"
    path.write_text(content)
    with pytest.raises(TrustStoreError, match=message) as error:
        TrustStore.load(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"format": "other", "version": 1}', "not a pi-sandbox trust store"),
        ('{"format": "pi-sandbox-trust", "version": 2}', "version 2"),
        (
            '{"format": "pi-sandbox-trust", "version": 1, "decisions": {"/a": {"decision": "x"}}}',
            "decision",
        ),
        (
            '{"format": "pi-sandbox-trust", "version": 1, "decisions": {"/a": {"decision": "yes"}}}',
            "'pi'",
        ),
        (
            '{"format": "pi-sandbox-trust", "version": 1, "decisions": {"/a": '
            '{"decision": "yes", "pi": true, "fingerprint": {"format": 9}}}}',
            "fingerprint",
        ),
    ],
)
def test_a_malformed_record_file_is_an_error_naming_it(tmp_path, content, message):
    path = _private(tmp_path / "trust.json", '{"/a": true}')
    _private(tmp_path / EXTRA_STORE_NAME, content)
    with pytest.raises(TrustStoreError, match=message) as error:
        TrustStore.load(path)
    assert str(tmp_path / EXTRA_STORE_NAME) in str(error.value)


def test_a_store_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trust.json"
    os.mkfifo(fifo)
    with pytest.raises(TrustStoreError, match="regular file"):
        TrustStore.load(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(TrustStoreError, match="a symbolic link, refused"):
        TrustStore.load(link)
    (tmp_path / "elsewhere.json").write_text("{}")  # a link to a real store: refused too
    with pytest.raises(TrustStoreError, match="a symbolic link, refused"):
        TrustStore.load(link)
    assert TrustStore.load(tmp_path / "missing.json").decisions == {}
    fifo.unlink()
    os.mkfifo(tmp_path / EXTRA_STORE_NAME)
    with pytest.raises(TrustStoreError, match="regular file"):
        TrustStore.load(tmp_path / "trust.json")


def test_a_store_pi_is_writing_is_read_again_under_its_lock(tmp_path):
    path = _private(tmp_path / "trust.json", '{"/a": tr')  # pi writes in place
    lock = tmp_path / "trust.json.lock"
    lock.mkdir()
    finished = []

    def pi_finishes():
        time.sleep(0.3)
        path.write_text('{"/a": true}')
        lock.rmdir()
        finished.append(True)

    import threading

    writer = threading.Thread(target=pi_finishes)
    writer.start()
    try:
        assert TrustStore.load(path).decisions == {"/a": "yes"}
    finally:
        writer.join()
    assert finished


def _private(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
    return path


# -- 1. concurrent writers -----------------------------------------------------------

_WRITER = """
import sys, time
from pathlib import Path
from pi_sandbox.resources.project_trust import TrustStore

def change(store):
    time.sleep(0.01)  # widen the load → save window a lost update needs
    store.set(Path("/d" + sys.argv[2]), "sandboxed" if int(sys.argv[2]) % 2 else "yes")

# A lock wait longer than the default: 20 writers at once on a saturated machine can
# queue for more than 10 s; losing no decision is what is tested, not the wait.
TrustStore.update(Path(sys.argv[1]), change, lock_timeout=600)
"""


def test_concurrent_updates_lose_no_decision(tmp_path):
    path = tmp_path / "agent" / "trust.json"
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(i)], stderr=subprocess.PIPE)
        for i in range(20)
    ]
    for writer in writers:
        _, stderr = writer.communicate(timeout=600)
        assert writer.returncode == 0, stderr.decode()
    assert TrustStore.load(path).decisions == {
        f"/d{i}": "sandboxed" if i % 2 else "yes" for i in range(20)
    }
    # The lock directory is gone once every writer released it.
    assert sorted(p.name for p in path.parent.iterdir()) == [EXTRA_STORE_NAME, "trust.json"]


def test_update_returns_the_change_result_and_writes_privately(tmp_path):
    path = tmp_path / "agent" / "trust.json"
    assert TrustStore.update(path, lambda s: s.set(Path("/a"), "no") or "done") == "done"
    assert TrustStore.update(path, lambda s: s.forget(Path("/a"))) is True
    assert TrustStore.update(path, lambda s: s.forget(Path("/a"))) is False
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not (tmp_path / "agent" / "trust.json.lock").exists()


def test_a_failing_change_writes_nothing(tmp_path):
    path = tmp_path / "trust.json"
    TrustStore.update(path, lambda s: s.set(Path("/a"), "yes"))
    before = path.read_bytes(), (tmp_path / EXTRA_STORE_NAME).read_bytes()

    def change(store):
        store.set(Path("/b"), "yes")
        store.set(Path("/c"), "maybe")

    with pytest.raises(ValueError, match="trust decision"):
        TrustStore.update(path, change)
    assert (path.read_bytes(), (tmp_path / EXTRA_STORE_NAME).read_bytes()) == before
    assert not (tmp_path / "trust.json.lock").exists()


def test_update_waits_for_pi_s_lock_directory_only_so_long(tmp_path):
    path = tmp_path / "trust.json"
    TrustStore.update(path, lambda s: s.set(Path("/a"), "yes"))
    before = path.read_bytes()
    lock = tmp_path / "trust.json.lock"
    lock.mkdir()  # pi 1.6.0 (proper-lockfile) holds it
    started = time.monotonic()
    with pytest.raises(TrustStoreError, match="locked by another process") as error:
        TrustStore.update(path, lambda s: s.set(Path("/b"), "yes"), lock_timeout=0.2)
    assert 0.2 <= time.monotonic() - started < 60  # generous: a loaded machine
    assert "trust.json.lock" in str(error.value)
    assert path.read_bytes() == before and lock.is_dir()  # a fresh lock is not ours to take
    lock.rmdir()
    TrustStore.update(path, lambda s: s.set(Path("/b"), "yes"))  # free again
    assert set(TrustStore.load(path).decisions) == {"/a", "/b"}


def test_a_stale_lock_directory_of_a_killed_writer_is_taken_over(tmp_path):
    path = tmp_path / "trust.json"
    lock = tmp_path / "trust.json.lock"
    lock.mkdir()
    old = time.time() - 11  # proper-lockfile's stale time is 10 s
    os.utime(lock, (old, old))
    TrustStore.update(path, lambda s: s.set(Path("/a"), "yes"), lock_timeout=0.2)
    assert TrustStore.load(path).decisions == {"/a": "yes"}
    assert not lock.exists()


def test_our_old_lock_file_is_waited_for_while_an_old_writer_holds_it(tmp_path):
    path = tmp_path / "trust.json"
    lock = tmp_path / "trust.json.lock"
    lock.write_text("")
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(TrustStoreError, match="locked by another process"):
            TrustStore.update(path, lambda s: s.set(Path("/a"), "yes"), lock_timeout=0.2)
        assert lock.is_file()
    finally:
        os.close(fd)
    TrustStore.update(path, lambda s: s.set(Path("/a"), "yes"), lock_timeout=5)
    assert not lock.exists()


def test_a_lock_that_is_neither_a_directory_nor_our_old_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "trust.json.lock")
    with pytest.raises(TrustStoreError, match="not a directory"):
        TrustStore.update(tmp_path / "trust.json", lambda s: None)
    (tmp_path / "trust.json.lock").unlink()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "trust.json.lock").symlink_to(tmp_path / "elsewhere")
    os.utime(tmp_path / "elsewhere", (1, 1))
    with pytest.raises(TrustStoreError, match="not a directory"):
        TrustStore.update(tmp_path / "trust.json", lambda s: None)
    assert (tmp_path / "elsewhere").is_dir()  # a link is never followed, even when "stale"
    assert not (tmp_path / "trust.json").exists()


# -- 2. a store too large to read back is not written -----------------------------------


def test_a_store_larger_than_the_limit_is_not_saved(tmp_path):
    path = tmp_path / "trust.json"
    TrustStore.update(path, lambda s: s.set(Path("/kept"), "yes"))
    before = path.read_bytes()
    store = TrustStore.load(path)
    for i in range(MAX_STORE_BYTES // 1000 + 10):
        store.set(Path("/" + "x" * 1000 + str(i)), "sandboxed")
    with pytest.raises(TrustStoreError, match=f"limit of {MAX_STORE_BYTES} bytes") as error:
        store.save()
    assert str(path) in str(error.value)
    assert path.read_bytes() == before

    def grow(store):
        for i in range(MAX_STORE_BYTES // 1000 + 10):
            store.set(Path("/" + "y" * 1000 + str(i)), "no")

    with pytest.raises(TrustStoreError, match="larger than the limit"):
        TrustStore.update(path, grow)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [EXTRA_STORE_NAME, "trust.json"]


# -- 3. temporaries of a killed writer ---------------------------------------------------


def test_update_removes_only_stale_temporaries(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    old = time.time() - 3600
    stale = agent / ".trust-abcd1234"
    stale.write_text("{")
    fresh = agent / ".trust-efgh5678"  # maybe a writer that is not ours, mid-write
    fresh.write_text("{")
    directory = agent / ".trust-dir12345"
    directory.mkdir()
    target = agent / "target"
    target.write_text("x")
    link = agent / ".trust-lnk12345"
    link.symlink_to(target)
    unrelated = agent / ".trust-not-a-temporary.json"
    unrelated.write_text("x")
    for path in (stale, directory, target, unrelated):
        os.utime(path, (old, old))
    os.utime(link, (old, old), follow_symlinks=False)

    TrustStore.update(agent / "trust.json", lambda s: s.set(Path("/a"), "yes"))

    assert not stale.exists()
    assert fresh.exists() and directory.is_dir() and link.is_symlink() and target.exists()
    assert unrelated.exists()


# -- 5. a store another user could have written -------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("name", ["trust.json", EXTRA_STORE_NAME])
def test_a_store_owned_by_another_user_is_refused(tmp_path, name):
    path = _private(tmp_path / "trust.json", '{"/": true}')
    TrustStore.update(path, lambda s: s.set(Path("/"), "yes"))
    os.chown(tmp_path / name, 65534, -1)
    with pytest.raises(TrustStoreError, match="owned by uid 65534") as error:
        TrustStore.load(path)
    assert str(tmp_path / name) in str(error.value)
    os.chown(tmp_path / name, os.geteuid(), -1)  # root's own store is fine
    assert TrustStore.load(path).decisions == {"/": "yes"}


def test_a_store_owned_by_another_user_is_refused_for_any_user(tmp_path, monkeypatch):
    path = _private(tmp_path / "trust.json", '{"/": true}')
    monkeypatch.setattr(os, "geteuid", lambda: path.stat().st_uid + 1)
    with pytest.raises(TrustStoreError, match="not by this user"):
        TrustStore.load(path)


@pytest.mark.parametrize("name", ["trust.json", EXTRA_STORE_NAME])
@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666, 0o622])
def test_a_store_writable_by_group_or_others_is_refused(tmp_path, mode, name):
    path = tmp_path / "trust.json"
    TrustStore.update(path, lambda s: s.set(Path("/"), "yes"))
    (tmp_path / name).chmod(mode)
    with pytest.raises(TrustStoreError, match="writable by group or others") as error:
        TrustStore.load(path)
    assert str(tmp_path / name) in str(error.value)
    assert f"{mode:04o}" in str(error.value)


def test_a_store_readable_by_others_is_still_used(tmp_path):
    # pi 1.6.0 creates trust.json with the umask's mode, usually 0644.
    path = _private(tmp_path / "trust.json", '{"/a": true}')
    path.chmod(0o644)
    assert TrustStore.load(path).decisions == {"/a": "yes"}


# -- 6. deep nesting ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "[" * 3000,
        '{"decisions": ' * 3000,
        "[" * 200_000,
        '{"version": 1, "decisions": {}, "x": ' + "[" * 500 + "]" * 500 + "}",
    ],
    ids=["array", "object", "array-200k", "decodable"],
)
def test_a_deeply_nested_store_is_an_error_naming_the_file(tmp_path, content):
    path = _private(tmp_path / "trust.json", content)
    with pytest.raises(TrustStoreError, match="nested too deeply") as error:
        TrustStore.load(path)
    assert str(path) in str(error.value)


def test_saving_a_deeply_nested_extra_is_an_error(tmp_path):
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(TrustStoreError, match="nested too deeply"):
        TrustStore(tmp_path / "trust.json", legacy_extra={"x": deep}).save()
    assert list(tmp_path.iterdir()) == []


# -- durability -------------------------------------------------------------------------------


def test_save_fsyncs_each_file_and_the_directory(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    TrustStore(tmp_path / "trust.json", {"/a": "yes"}).save()
    assert synced == ["file", "dir", "file", "dir"]


def test_a_new_decision_is_recorded_before_pi_sees_it_and_forgotten_after(tmp_path, monkeypatch):
    from pi_sandbox.resources import project_trust

    written: list[str] = []
    real = project_trust._write_atomically
    monkeypatch.setattr(
        project_trust, "_write_atomically", lambda p, d: written.append(p.name) or real(p, d)
    )
    path = tmp_path / "trust.json"
    TrustStore.update(path, lambda s: s.set(Path("/a"), "yes"))
    assert written == [EXTRA_STORE_NAME, "trust.json"]
    written.clear()
    TrustStore.update(path, lambda s: s.forget(Path("/a")))
    assert written == ["trust.json", EXTRA_STORE_NAME]
