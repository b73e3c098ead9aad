"""A turn boundary's fsync runs in a thread while the next turn starts (issue 20 target 1),
and nothing is closed or lost before it has finished (issue 15 "Robustness")."""

from __future__ import annotations

import threading

import pytest

from pi_sandbox.supervisor.sessions import session_file
from pi_sandbox.supervisor.sessions.session_file import SessionWriter


def _writer(tmp_path) -> SessionWriter:
    return SessionWriter.create(tmp_path, tmp_path)


def test_sync_soon_returns_before_the_fsync_ends_and_close_waits_for_it(tmp_path, monkeypatch):
    release = threading.Event()
    started = threading.Event()
    synced: list[tuple[int, str]] = []
    real_fsync = session_file.os.fsync

    def slow_fsync(fd: int) -> None:
        started.set()
        assert release.wait(30)
        synced.append((fd, threading.current_thread().name))
        real_fsync(fd)

    monkeypatch.setattr(session_file.os, "fsync", slow_fsync)
    writer = _writer(tmp_path)
    writer.append_message({"role": "user", "content": "one", "timestamp": 1})
    writer.sync_soon()  # returns although the fsync is still blocked
    assert started.wait(30) and synced == []
    closer = threading.Thread(target=writer.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive(), "close must wait for the running fsync before closing the file"
    release.set()
    closer.join(30)
    assert not closer.is_alive()
    assert [name for _, name in synced] == ["session-fsync"]
    assert b'"one"' in writer.path.read_bytes()


def test_sync_soon_with_nothing_new_starts_no_fsync(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(session_file.os, "fsync", synced.append)
    writer = _writer(tmp_path)
    writer.sync()
    synced.clear()
    writer.sync_soon()
    writer.sync()
    assert synced == []
    writer.append_message({"role": "user", "content": "two", "timestamp": 1})
    writer.sync_soon()
    writer.sync()  # waits for the thread; nothing appended since: no second fsync
    assert len(synced) == 1
    writer.close()


def test_a_failed_background_fsync_is_raised_by_the_next_sync(tmp_path, monkeypatch):
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    writer = _writer(tmp_path)
    monkeypatch.setattr(session_file.os, "fsync", failing_fsync)
    writer.append_message({"role": "user", "content": "three", "timestamp": 1})
    writer.sync_soon()
    with pytest.raises(OSError, match="Input/output error"):
        writer.sync()
    monkeypatch.undo()
    writer.close()
