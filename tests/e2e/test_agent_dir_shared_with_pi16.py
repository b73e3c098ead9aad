"""pi 1.6.0 and pi-sandbox on ONE agent directory, in either order (issue 17 §4).

Against the real pi 1.6.0 (the shared `pi16` fixture, tests/e2e/pi16.py: installed
with npm into a cache; skipped with the reason where npm or the registry is
unavailable). Each program first writes everything it writes — a key (ours with ``pi auth login``, pi's with its own
``AuthStorage``), a trust decision, a session — beside the files a user shares
between them (``settings.json`` with both programs' keys, ``models.json`` with a
custom provider, extensions of both kinds in ``extensions/`` and in a directory
``settings.json`` lists, ``mcp.json``). Then the other program starts: it exits 0
with no warning or error about the first one's files, uses the shared key, trust
decision and model defaults (the custom provider is a loopback server that records
the key it receives), lists the sessions, and leaves every file the first one wrote
byte-for-byte as it was. Both programs writing ``auth.json`` and ``trust.json`` at
once lose nothing (the shared proper-lockfile lock).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fake_openai import FakeOpenAI, text

if TYPE_CHECKING:
    from pi16 import Pi16

pytestmark = pytest.mark.e2e
pytest_plugins = ["pi16"]  # the shared `pi16` fixture (tests/e2e/pi16.py)

TIMEOUT_S = 180

OUR_KEY = "sk-ours-shared-7f3a"
PI_KEY = "sk-pi-shared-91c2"

# A pi extension that proves pi 1.6.0 loaded it: it appends its name to $MARK_FILE.
TS_EXTENSION = """\
import { appendFileSync } from "node:fs";
export default function (pi: any) { appendFileSync(process.env.MARK_FILE!, "{name}\\n"); }
"""

PY_EXTENSION = "def extension(pi):\n    pass\n"

# Lines a clean start may print on stderr: our notices that an extension loaded.
BENIGN = ("ℹ Loaded user extension", "ℹ Loaded project extension")


class Shared:
    """One agent directory, one project, and how to run each program there."""

    def __init__(self, root: Path, pi16: Pi16) -> None:
        self.root = root
        self.pi16 = pi16
        self.home = root / "home"
        self.agent = root / "agent"
        self.proj = root / "proj"
        self.shared_exts = root / "shared-exts"
        self.mark = root / "MARK"
        for d in (self.home, self.proj / ".git", self.proj / ".pi" / "extensions"):
            d.mkdir(parents=True)
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "PI_CODING_AGENT_DIR": str(self.agent),
            "MARK_FILE": str(self.mark),
        }
        for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            self.env.pop(name, None)

    def write_user_files(self, url: str) -> None:
        """What the user writes once for both programs."""
        self.agent.mkdir(mode=0o700, exist_ok=True)
        exts = self.agent / "extensions"
        (exts / "pypkg").mkdir(parents=True)
        (exts / "tspkg").mkdir()
        (exts / "user_ext.py").write_text(PY_EXTENSION)
        (exts / "pypkg" / "__init__.py").write_text(PY_EXTENSION)
        (exts / "user_ext.ts").write_text(TS_EXTENSION.replace("{name}", "user_ext.ts"))
        (exts / "tspkg" / "index.ts").write_text(TS_EXTENSION.replace("{name}", "tspkg"))
        self.shared_exts.mkdir()
        (self.shared_exts / "listed.py").write_text(PY_EXTENSION)
        (self.shared_exts / "listed.ts").write_text(TS_EXTENSION.replace("{name}", "listed.ts"))
        project_ts = self.proj / ".pi" / "extensions" / "project_ext.ts"
        project_ts.write_text(TS_EXTENSION.replace("{name}", "project_ext.ts"))
        settings = {
            # Model defaults both programs read: the custom provider of models.json.
            "defaultProvider": "myllm",
            "defaultModel": "my-model",
            "defaultThinkingLevel": "off",
            # pi's keys we do not read, and keys both read.
            "theme": "dark",
            "quietStartup": True,
            "compaction": {"enabled": True, "reserveTokens": 16384, "keepRecentTokens": 20000},
            "retry": {"enabled": True, "maxRetries": 2, "baseDelayMs": 500},
            "branchSummary": {"skipPrompt": True},
            # pi's built-in extension entries, and a directory each program reads its
            # own kind of extension from.
            "extensions": ["builtin:mcp", "-builtin:codemode", str(self.shared_exts)],
        }
        (self.agent / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
        models = {
            "providers": {
                "myllm": {
                    "baseUrl": url,
                    "api": "openai-completions",
                    "models": [
                        {
                            "id": "my-model",
                            "name": "My Model",
                            "contextWindow": 32000,
                            "maxTokens": 4096,
                        }
                    ],
                }
            }
        }
        (self.agent / "models.json").write_text(json.dumps(models, indent=2) + "\n")
        mcp = {"mcpServers": {"docs": {"command": "/bin/true", "enabled": False}}}
        (self.agent / "mcp.json").write_text(json.dumps(mcp, indent=2) + "\n")
        # Ours alone: pi must ignore them.
        (self.agent / "policy.yaml").write_text(
            "version: 1\ntool_call:\n  rules:\n    - id: no-push\n      tool: bash\n"
            "      command: [git, push]\n      decision: deny\n      reason: not from here\n"
        )
        (self.agent / "quarantine" / "20261201-1").mkdir(parents=True)
        (self.agent / "quarantine" / "20261201-1" / ".envrc").write_text("echo planted\n")

    # -- running each program ---------------------------------------------------------

    def ours(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pi_sandbox.cli", *args],
            cwd=self.proj,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )

    def pi(self, *args: str) -> subprocess.CompletedProcess[str]:
        """pi 1.6.0's CLI in the project (no model option: settings.json's defaults)."""
        return subprocess.run(
            [str(self.pi16.node), str(self.pi16.cli), "--offline", *args],
            cwd=self.proj,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )

    def pi_js(self, code: str) -> subprocess.CompletedProcess[str]:
        """``code`` as an ES module with pi 1.6.0's own store classes imported."""
        core = self.pi16.package / "dist" / "core"
        script = (
            f"import {{ AuthStorage, ReadOnlyAuthStorage }} from "
            f"{json.dumps(str(core / 'auth-storage.js'))};\n"
            f"import {{ ProjectTrustStore }} from {json.dumps(str(core / 'trust-manager.js'))};\n"
            f"import {{ SessionManager }} from {json.dumps(str(core / 'session-manager.js'))};\n"
            f"const AGENT = {json.dumps(str(self.agent))};\n" + code
        )
        return subprocess.run(
            [str(self.pi16.node), "--input-type=module", "-e", script],
            cwd=self.proj,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )

    def pi_session_ids(self) -> list[str]:
        listed = self.pi_js(
            f"const s = await SessionManager.list({json.dumps(str(self.proj))});"
            "console.log(JSON.stringify(s.map((i) => i.id)));"
        )
        assert listed.returncode == 0, listed.stderr
        return json.loads(listed.stdout)

    def pi_reads_auth(self) -> dict[str, object]:
        read = self.pi_js(
            "const s = new ReadOnlyAuthStorage(AGENT + '/auth.json');"
            "console.log(JSON.stringify(s.load()));"
        )
        assert read.returncode == 0, read.stderr
        return json.loads(read.stdout)

    def our_session_ids(self) -> list[str]:
        from pi_sandbox.supervisor.sessions.catalog import list_sessions

        return [row.id for row in list_sessions(self.agent, self.proj)]

    def files(self) -> dict[str, bytes]:
        """Every regular file of the agent directory and the shared extension directory."""
        out = {}
        for base in (self.agent, self.shared_exts):
            for path in sorted(base.rglob("*")):
                if path.is_file():
                    out[str(path)] = path.read_bytes()
        return out

    def marks(self) -> set[str]:
        return set(self.mark.read_text().split()) if self.mark.exists() else set()


def complaints(stderr: str) -> list[str]:
    """stderr lines other than our extension-loaded notices."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(BENIGN)]


def session_lines_parse(path: str) -> bool:
    return all(isinstance(json.loads(line), dict) for line in Path(path).read_text().splitlines())


@pytest.fixture
def shared(tmp_path: Path, pi16: Pi16) -> Shared:
    return Shared(tmp_path, pi16)


def test_pi_1_6_starts_cleanly_after_ours_and_uses_our_key_trust_defaults_and_session(shared):
    replies = [text("ours-answer"), text("pi-answer"), text("pi-again"), text("ours-again")]
    with FakeOpenAI(replies) as server:
        shared.write_user_files(server.url)
        login = shared.ours("auth", "login", "myllm", stdin=OUR_KEY + "\n")
        assert login.returncode == 0, login.stderr
        trust = shared.ours("trust", "yes", str(shared.proj))
        assert trust.returncode == 0, trust.stderr
        run = shared.ours("-p", "hello from ours")
        assert run.returncode == 0, run.stderr
        assert run.stdout == "ours-answer\n"
        assert complaints(run.stderr) == []
        [our_session] = shared.our_session_ids()
        before = shared.files()

        started = shared.pi("-p", "hello from pi")

        assert started.returncode == 0, started.stderr
        assert started.stderr == ""
        assert started.stdout.strip() == "pi-answer"
        # pi used the key we stored and the model defaults of the shared settings.
        assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {OUR_KEY}"] * 2
        assert [r.body["model"] for r in server.requests] == ["my-model"] * 2
        # Our `trust yes` applies in pi (it loaded the project's extension); it loaded its
        # own kind of extension from extensions/ and from the listed directory, not ours.
        assert shared.marks() == {"project_ext.ts", "user_ext.ts", "tspkg", "listed.ts"}
        assert our_session in shared.pi_session_ids()
        after = shared.files()
        # pi changed none of our files, only added its own (its session, models-store.json).
        assert {p: after[p] for p in before} == before
        added = {Path(p).relative_to(shared.agent).parts[0] for p in set(after) - set(before)}
        assert added == {"models-store.json", "sessions"}
        assert all(session_lines_parse(p) for p in after if p.endswith(".jsonl"))
        # pi continues our session (the newest is pi's own: name ours by id), and ours
        # continues it after pi.
        more = shared.pi("--session", our_session, "-p", "more")
        assert more.returncode == 0, more.stderr
        assert more.stdout.strip() == "pi-again"
        again = shared.ours("--session", our_session, "-p", "and more")
        assert again.returncode == 0, again.stderr
        assert again.stdout == "ours-again\n" and complaints(again.stderr) == []
        assert len(server.requests) == 4
        # Both had the whole conversation: pi's request carried our first exchange.
        contents = json.dumps(server.requests[3].body["messages"])
        assert "hello from ours" in contents and "more" in contents


def test_ours_starts_cleanly_after_pi_1_6_and_uses_its_key_trust_defaults_and_session(shared):
    with FakeOpenAI([text("pi-answer"), text("ours-answer"), text("ours-continued")]) as server:
        shared.write_user_files(server.url)
        # pi's own stores write its key and its trust decision.
        wrote = shared.pi_js(
            "const auth = AuthStorage.create(AGENT + '/auth.json');"
            f"await auth.modify('myllm', () => ({{ type: 'api_key', key: {json.dumps(PI_KEY)} }}));"
            f"new ProjectTrustStore(AGENT).set({json.dumps(str(shared.proj))}, true);"
        )
        assert wrote.returncode == 0, wrote.stderr
        run = shared.pi("-p", "hello from pi")
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "pi-answer"
        [pi_session] = shared.pi_session_ids()
        before = shared.files()

        started = shared.ours("-p", "hello from ours")

        assert started.returncode == 0, started.stderr
        assert started.stdout == "ours-answer\n"
        # One line tells the user pi's decision now also binds the project's content
        # (issue 14 §4, kept in our own file); nothing else.
        [bound] = complaints(started.stderr)
        assert "(saved by pi 1.6.0) is now bound to the content" in bound
        # Our extensions loaded (extensions/ and the listed directory), pi's skipped.
        for name in ("user_ext.py", "pypkg", "listed.py"):
            assert name in started.stderr
        assert ".ts" not in started.stderr and "tspkg" not in started.stderr
        assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {PI_KEY}"] * 2
        assert [r.body["model"] for r in server.requests] == ["my-model"] * 2
        shown = json.loads(shared.ours("trust", "show", str(shared.proj), "--json").stdout)
        assert shown["decision"] == "yes"
        assert pi_session in shared.our_session_ids()
        after = shared.files()
        # Ours changed none of pi's files; it added its own trust file.
        assert {p: after[p] for p in before} == before
        assert {Path(p).name for p in set(after) - set(before)} == {
            "pi-sandbox-trust.json",
            next(Path(p).name for p in after if p.endswith(".jsonl") and p not in before),
        }
        # Ours opens pi's session by id and continues it; pi still lists and reads it.
        continued = shared.ours("--session", pi_session, "-p", "more")
        assert continued.returncode == 0, continued.stderr
        assert continued.stdout == "ours-continued\n" and complaints(continued.stderr) == []
        # Our request carried pi's exchange, and one system prompt: ours (pi 1.6.0's
        # session records its own system prompt as a `system` message; not sent).
        wire = server.requests[2].body["messages"]
        assert [m["role"] for m in wire] == ["system", "user", "assistant", "user"]
        assert "hello from pi" in json.dumps(wire[1]) and "pi-answer" in json.dumps(wire[2])
    [pi_file] = [p for p in after if pi_session in p]
    assert session_lines_parse(pi_file)
    assert pi_session in shared.pi_session_ids()
    # pi's stores still read what they wrote, beside what ours added since.
    assert shared.pi_reads_auth()["myllm"] == {"type": "api_key", "key": PI_KEY}


def test_a_python_file_listed_in_settings_extensions_stops_pi_1_6_but_its_directory_does_not(
    shared,
):
    # Why docs/agent-dir.md says to list directories, not .py files: pi loads every
    # listed file as an extension. The control of the listed-directory case above.
    with FakeOpenAI([text("ok")]) as server:
        shared.write_user_files(server.url)
        settings = json.loads((shared.agent / "settings.json").read_text())
        settings["extensions"].append(str(shared.shared_exts / "listed.py"))
        (shared.agent / "settings.json").write_text(json.dumps(settings))
        failed = shared.pi("-p", "hi")
        assert failed.returncode != 0
        assert 'Unknown file extension ".py"' in failed.stderr
        # Ours loads it either way, quietly.
        ours = shared.ours("--trust", "yes", "-p", "hi")
        assert ours.returncode == 0, ours.stderr
        assert complaints(ours.stderr) == []


def test_a_session_dir_set_in_settings_json_holds_both_programs_sessions(shared):
    sessions = shared.root / "shared-sessions"
    with FakeOpenAI([text("ours-answer"), text("pi-answer"), text("ours-again")]) as server:
        shared.write_user_files(server.url)
        settings = json.loads((shared.agent / "settings.json").read_text())
        settings["sessionDir"] = str(sessions)
        (shared.agent / "settings.json").write_text(json.dumps(settings, indent=2))
        assert shared.ours("auth", "login", "myllm", stdin=OUR_KEY + "\n").returncode == 0
        ours = shared.ours("--trust", "yes", "-p", "hello from ours")
        assert ours.returncode == 0, ours.stderr
        [our_file] = sessions.glob("*.jsonl")
        our_id = json.loads(our_file.read_text().splitlines()[0])["id"]
        # pi finds our session there by id, and continues it.
        more = shared.pi("--session", our_id, "-p", "more")
        assert more.returncode == 0, more.stderr
        assert more.stdout.strip() == "pi-answer"
        assert "more" in our_file.read_text()
        # And ours continues it after pi, found in the same directory.
        again = shared.ours("--trust", "yes", "-c", "-p", "and more")
        assert again.returncode == 0, again.stderr
        assert again.stdout == "ours-again\n"
    assert list((shared.agent / "sessions").rglob("*.jsonl")) == []  # none in the default store
    assert [p.name for p in sessions.glob("*.jsonl")] == [our_file.name]


# -- both writing at once ---------------------------------------------------------------

ROUNDS = 40

OUR_WRITER = """
import sys, time
from pathlib import Path
from pi_sandbox.resources.project_trust import TrustStore
from pi_sandbox.supervisor.providers.auth_store import store_api_key
agent, go, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
while not go.exists():
    time.sleep(0.005)
for i in range(rounds):
    store_api_key(agent, f"ours-{i}", f"k-ours-{i}")
    TrustStore.update(agent / "trust.json", lambda s: s.set(Path(f"/work/ours-{i}"), "yes"))
"""

PI_WRITER = """
import { existsSync } from "node:fs";
const [go, rounds] = [process.env.GO_FILE, Number(process.env.ROUNDS)];
while (!existsSync(go)) await new Promise((r) => setTimeout(r, 5));
const auth = AuthStorage.create(AGENT + "/auth.json");
const trust = new ProjectTrustStore(AGENT);
let retried = 0;
for (let i = 0; i < rounds; i++) {
  await auth.modify(`pi-${i}`, () => ({ type: "api_key", key: `k-pi-${i}` }));
  // pi's trust store gives up after ~200 ms of ELOCKED; a caller tries again.
  for (;;) {
    try { trust.set(`/work/pi-${i}`, true); break; }
    catch (e) { if (e.code !== "ELOCKED") throw e; retried++; }
  }
}
console.log(JSON.stringify({ retried }));
"""


def test_both_programs_writing_auth_and_trust_at_once_lose_nothing(shared):
    go = shared.root / "GO"
    shared.agent.mkdir(mode=0o700)
    ours = subprocess.Popen(
        [sys.executable, "-c", OUR_WRITER, str(shared.agent), str(go), str(ROUNDS)],
        env=shared.env,
        stderr=subprocess.PIPE,
        text=True,
    )
    core = shared.pi16.package / "dist" / "core"
    script = (
        f"import {{ AuthStorage }} from {json.dumps(str(core / 'auth-storage.js'))};\n"
        f"import {{ ProjectTrustStore }} from {json.dumps(str(core / 'trust-manager.js'))};\n"
        f"const AGENT = {json.dumps(str(shared.agent))};\n" + PI_WRITER
    )
    theirs = subprocess.Popen(
        [str(shared.pi16.node), "--input-type=module", "-e", script],
        env={**shared.env, "GO_FILE": str(go), "ROUNDS": str(ROUNDS)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    go.write_text("go")
    _, our_err = ours.communicate(timeout=TIMEOUT_S)
    their_out, their_err = theirs.communicate(timeout=TIMEOUT_S)
    elapsed = time.monotonic() - started
    assert ours.returncode == 0, our_err
    assert theirs.returncode == 0, their_err
    expected = {f"{who}-{i}" for who in ("ours", "pi") for i in range(ROUNDS)}

    from pi_sandbox.resources.project_trust import TrustStore
    from pi_sandbox.supervisor.providers.auth_store import read_auth

    assert set(read_auth(shared.agent)) == expected
    assert set(shared.pi_reads_auth()) == expected
    decisions = TrustStore.load(shared.agent / "trust.json").decisions
    assert set(decisions) == {f"/work/{name}" for name in expected}
    assert set(json.loads((shared.agent / "trust.json").read_text())) == set(decisions)
    # No lock left behind, no temporary file.
    assert sorted(p.name for p in shared.agent.iterdir()) == [
        "auth.json",
        "pi-sandbox-trust.json",
        "trust.json",
    ]
    print(f"{2 * ROUNDS} writers' rounds in {elapsed:.1f} s; pi retries {their_out.strip()}")


def _pi_auth_lock_holder(shared: Shared, seconds: float) -> subprocess.Popen[str]:
    """A node process holding ``auth.json``'s lock exactly as pi's auth storage takes
    it (proper-lockfile on the resolved file), printing "held", then the release time."""
    lockfile = shared.pi16.package.parent.parent / "proper-lockfile"
    return subprocess.Popen(
        [
            str(shared.pi16.node),
            "-e",
            f"const l = require({json.dumps(str(lockfile))});"
            f"const release = l.lockSync({json.dumps(str(shared.agent / 'auth.json'))});"
            "console.log('held');"
            f"setTimeout(() => {{ console.log(Date.now()); release(); }}, {int(seconds * 1000)});",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_pi_s_auth_lock_excludes_both_programs(shared):
    from pi_sandbox.supervisor.providers import auth_store

    auth_store.store_api_key(shared.agent, "first", "k1")
    # pi holds its lock: our login waits until pi releases it.
    holder = _pi_auth_lock_holder(shared, 1.5)
    try:
        assert holder.stdout.readline().strip() == "held"
        auth_store.store_api_key(shared.agent, "ours", "k2")
        stored_at = time.time()
        released_ms = int(holder.stdout.readline())
    finally:
        holder.wait(timeout=30)
    assert stored_at * 1000 >= released_ms - 1
    # Ours holds the lock: pi's auth storage waits for it (it retries for up to 30 s).
    modify = (
        "console.log('trying');"
        "const auth = AuthStorage.create(AGENT + '/auth.json');"
        "await auth.modify('pi', () => ({ type: 'api_key', key: 'k3' }));"
        "console.log(Date.now());"
    )
    with auth_store._locked(shared.agent):
        writer = subprocess.Popen(
            [str(shared.pi16.node), "--input-type=module", "-e", _pi_js_script(shared, modify)],
            env=shared.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout.readline().strip() == "trying"
        # Held a while longer so pi's writer is waiting on it (whatever the timing,
        # the write must come after the release).
        time.sleep(0.5)
        released_at = time.time()
    out, err = writer.communicate(timeout=TIMEOUT_S)
    assert writer.returncode == 0, err
    assert int(out) >= released_at * 1000 - 1
    assert set(shared.pi_reads_auth()) == {"first", "ours", "pi"}


def test_control_our_old_flock_never_excluded_pi_s_auth_storage(shared):
    import fcntl

    from pi_sandbox.supervisor.providers import auth_store

    auth_store.store_api_key(shared.agent, "first", "k1")
    # The lock pi-sandbox used before issue 17: flock on a file pi does not know.
    fd = os.open(shared.agent / ".auth.json.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        wrote = shared.pi_js(
            "const auth = AuthStorage.create(AGENT + '/auth.json');"
            "await auth.modify('pi', () => ({ type: 'api_key', key: 'k3' }));"
        )
        # pi wrote while "our" old lock was held: it excluded nothing.
        assert wrote.returncode == 0, wrote.stderr
        assert set(shared.pi_reads_auth()) == {"first", "pi"}
    finally:
        os.close(fd)


def _pi_js_script(shared: Shared, code: str) -> str:
    core = shared.pi16.package / "dist" / "core"
    return (
        f"import {{ AuthStorage }} from {json.dumps(str(core / 'auth-storage.js'))};\n"
        f"const AGENT = {json.dumps(str(shared.agent))};\n" + code
    )
