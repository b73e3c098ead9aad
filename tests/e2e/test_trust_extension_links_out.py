"""F4 of the 0.6 red-team, end to end: a trusted project cannot load extension code
that lies outside it, so changing that code cannot slip past the trust fingerprint.

The reported attack: ``A/.pi/extensions/helper.py`` is a symlink to
``../../../B/helper.py``; the user runs ``pi trust yes A``; ``B/helper.py`` changes;
the next run in ``A`` loaded the new code "(without a sandbox)" with no "changed"
notice, because the fingerprint records a link leading out of the project by its
target only, while discovery followed it. Now discovery refuses every project
extension (a file, a package, or any file of a package) that resolves outside the
project, with a notice naming the path and the rule (issue 14 §4, issue 6 "a
project's files must be its own"); the controls show the same code as the project's
own file loads.

Every run is the real ``pi`` CLI in a subprocess with a private ``HOME`` and
``PI_CODING_AGENT_DIR``. The extension code writes a sentinel file when imported:
the sentinel existing means that code ran.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pi_runs import pi_cli as cli
from pi_runs import plain_run

pytestmark = [pytest.mark.e2e, pytest.mark.security]


def code_writing(sentinel: Path, text: str) -> str:
    return (
        "import pathlib\n"
        f"pathlib.Path({str(sentinel)!r}).write_text({text!r})\n"
        "def extension(pi):\n"
        "    pass\n"
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def trust_yes(tmp_path: Path, path: Path) -> None:
    saved = cli(tmp_path, "trust", "yes", str(path))
    assert saved.returncode == 0, saved.stderr


def test_a_trusted_project_never_runs_changed_extension_code_it_links_to_outside(tmp_path):
    sentinel = tmp_path / "SENTINEL"
    project = tmp_path / "A"
    (project / ".pi" / "extensions").mkdir(parents=True)
    outside = write(tmp_path / "B" / "helper.py", code_writing(sentinel, "original"))
    helper = project / ".pi" / "extensions" / "helper.py"
    helper.symlink_to("../../../B/helper.py")
    trust_yes(tmp_path, project)

    first = plain_run(tmp_path, project)
    assert first.returncode == 0, first.stderr
    assert not sentinel.exists(), "code outside the project ran"

    outside.write_text(code_writing(sentinel, "changed"))  # what the red team did
    run = plain_run(tmp_path, project)
    assert run.returncode == 0, run.stderr
    assert not sentinel.exists(), "changed code outside the project ran"
    assert "without a sandbox" not in run.stderr
    # The run says why: the path, where it leads, and the rule.
    assert f"Refused project extension {helper}" in run.stderr
    assert str(outside) in run.stderr
    assert "outside the project" in run.stderr and "must be its own" in run.stderr


def test_a_package_whose_sibling_module_links_out_is_refused_and_never_imported(tmp_path):
    sentinel = tmp_path / "SENTINEL"
    project = tmp_path / "A"
    package = project / ".pi" / "extensions" / "toolkit"
    write(package / "__init__.py", "from . import sibling\ndef extension(pi):\n    pass\n")
    outside = write(tmp_path / "B" / "sibling.py", code_writing(sentinel, "original"))
    (package / "sibling.py").symlink_to(outside)
    trust_yes(tmp_path, project)
    outside.write_text(code_writing(sentinel, "changed"))

    run = plain_run(tmp_path, project)
    assert run.returncode == 0, run.stderr
    assert not sentinel.exists(), "code outside the project ran"
    assert f"Refused project extension {package}" in run.stderr
    assert str(package / "sibling.py") in run.stderr and "outside the project" in run.stderr


@pytest.mark.parametrize("shape", ["file", "package"])
def test_control_the_same_extension_as_the_projects_own_file_loads_once_trusted(tmp_path, shape):
    sentinel = tmp_path / "SENTINEL"
    project = tmp_path / "A"
    extensions = project / ".pi" / "extensions"
    if shape == "file":
        loaded = write(extensions / "helper.py", code_writing(sentinel, "own"))
    else:
        loaded = extensions / "toolkit"
        write(loaded / "__init__.py", "from . import sibling\ndef extension(pi):\n    pass\n")
        write(loaded / "sibling.py", code_writing(sentinel, "own"))
    trust_yes(tmp_path, project)
    run = plain_run(tmp_path, project)
    assert run.returncode == 0, run.stderr
    assert sentinel.read_text() == "own"
    assert f"Loaded project extension {loaded} (without a sandbox)" in run.stderr
    assert "Refused" not in run.stderr
