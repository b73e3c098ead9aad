"""The exposure registry, tool_search ranking and activations (issue 19), in memory."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pi_sandbox.supervisor.agent.tool_exposure import (
    ToolExposure,
    activations_on_branch,
    script_identifier,
    tokenize,
)
from pi_sandbox.supervisor.agent.tool_selection import ToolSelection
from pi_sandbox.supervisor.host_tools.codemode import parse_options
from pi_sandbox.supervisor.providers.base import ToolDefinition
from pi_sandbox.worker.codemode_runner import ToolError, run_script


def tool(name: str, description: str = "", **properties: Any) -> ToolDefinition:
    return ToolDefinition(
        name,
        description,
        {"type": "object", "properties": {k: {"type": "string"} for k in properties}},
    )


def registry(**kwargs: Any) -> ToolExposure:
    exposure = ToolExposure(**kwargs)
    exposure.register(tool("read", "Read a file"), "direct", "builtin")
    exposure.register(tool("lookup_weather", "Current weather forecast", city=1), "deferred", "x")
    exposure.register(tool("mcp__git__log", "Show commit history", path=1), "codemode", "mcp:git")
    exposure.register(tool("wipe_disk", "Erase weather data"), "hidden", "x")
    return exposure


def names(found: list[Any]) -> list[str]:
    return [t.definition.name for t in found]


def test_direct_tools_are_declared_and_the_others_only_once_activated():
    exposure = registry()
    assert [d.name for d in exposure.declared()] == ["read"]
    assert exposure.activate(["lookup_weather", "wipe_disk", "nope", "read"]) == ["lookup_weather"]
    assert [d.name for d in exposure.declared()] == ["read", "lookup_weather"]
    assert exposure.activate(["lookup_weather"]) == []


def test_search_ranks_by_name_description_and_parameter_names_and_skips_hidden_tools():
    exposure = registry()
    assert names(exposure.search("weather")) == ["lookup_weather"]
    assert names(exposure.search("commit history")) == ["mcp__git__log"]
    assert names(exposure.search("city")) == ["lookup_weather"]
    assert exposure.search("read a file") == []  # declared tools are not offered again
    assert exposure.search("") == []


def test_search_finds_parameters_behind_a_local_ref():
    exposure = ToolExposure()
    schema = {
        "type": "object",
        "properties": {"filter": {"$ref": "#/$defs/Filter"}},
        "$defs": {"Filter": {"type": "object", "properties": {"assignee": {"type": "string"}}}},
    }
    exposure.register(ToolDefinition("find_issues", "Find issues", schema), "deferred", "x")
    exposure.register(tool("other", "Something else"), "deferred", "x")
    assert names(exposure.search("assignee")) == ["find_issues"]


def test_a_tool_matching_more_query_words_ranks_first_and_a_whole_name_wins():
    exposure = ToolExposure()
    exposure.register(tool("notes", "Mentions peekaboo peekaboo peekaboo often"), "deferred", "x")
    exposure.register(tool("mcp__peekaboo__app", "Control an app"), "deferred", "x")
    exposure.register(tool("mcp__peekaboo__see", "Look at the screen"), "deferred", "x")
    exposure.register(tool("screenshot", "Use peekaboo to see the screen"), "deferred", "x")
    assert names(exposure.search("peekaboo app"))[0] == "mcp__peekaboo__app"
    # Both match both words; the one with them in its name ranks first.
    assert names(exposure.search("peekaboo see"))[0] == "mcp__peekaboo__see"
    assert names(exposure.search("mcp__peekaboo__see please", 1)) == ["mcp__peekaboo__see"]


def test_search_matches_words_in_any_script():
    exposure = ToolExposure()
    exposure.register(tool("search_records", "搜索 记录 records"), "deferred", "x")
    exposure.register(tool("cafe_menu", "Menu of the café"), "deferred", "x")
    assert names(exposure.search("记录")) == ["search_records"]
    assert names(exposure.search("cafe\u0301")) == ["cafe_menu"]


def test_codemode_may_call_deferred_and_codemode_tools_and_declared_direct_ones_only():
    exposure = registry(selected=lambda name: name != "read")
    assert exposure.callable_from_codemode("lookup_weather")
    assert exposure.callable_from_codemode("mcp__git__log")
    assert not exposure.callable_from_codemode("wipe_disk")
    assert not exposure.callable_from_codemode("read")  # not selected: not declared
    assert not exposure.callable_from_codemode("missing")


def test_unreachable_tools_are_neither_declared_searched_nor_callable():
    exposure = registry(reachable=lambda name: not name.startswith("mcp__"))
    exposure.activate(["mcp__git__log"])
    assert "mcp__git__log" not in [d.name for d in exposure.declared()]
    assert exposure.search("commit history") == []
    assert not exposure.callable_from_codemode("mcp__git__log")


def test_an_activation_waits_for_a_tool_that_registers_later():
    # pi 1.6.0 dropped loaded tools whose MCP server had not reconnected yet.
    exposure = ToolExposure()
    exposure.restore(["mcp__slow__query"])
    assert exposure.declared() == []
    exposure.register(tool("mcp__slow__query", "Query"), "deferred", "mcp:slow")
    assert [d.name for d in exposure.declared()] == ["mcp__slow__query"]


def test_an_extension_choosing_a_deferred_tool_declares_it_but_never_a_hidden_one():
    chosen: set[str] = set()
    exposure = registry(chosen=chosen.__contains__)
    chosen.update({"lookup_weather", "wipe_disk"})
    assert [d.name for d in exposure.declared()] == ["read", "lookup_weather"]


def test_a_recorded_activation_does_not_declare_an_unselected_direct_tool():
    exposure = registry(selected=lambda name: False)
    exposure.restore(["read"])
    assert exposure.declared() == []


def test_activations_replay_tools_added_and_removed_on_the_branch():
    def system(**fields: Any) -> dict[str, Any]:
        return {"type": "message", "message": {"role": "system", "content": "", **fields}}

    branch = [
        system(toolsAdded=[{"name": "a"}, {"name": "b"}]),
        {"type": "message", "message": {"role": "user", "content": "hi"}},
        system(toolsRemoved=[{"name": "a"}]),
        system(toolsAdded=[{"name": "c"}, {"bad": 1}]),
        {"type": "custom", "toolsAdded": [{"name": "x"}]},
    ]
    assert activations_on_branch(branch) == ["b", "c"]


def test_registering_a_bad_exposure_names_the_tool():
    with pytest.raises(ValueError, match=r"'t'.*exposure 'sideways'"):
        ToolExposure().register(tool("t"), "sideways", "x")


def test_replace_source_unregisters_what_a_source_no_longer_has():
    exposure = registry()
    exposure.replace_source("mcp:git", [(tool("mcp__git__diff", "Diff"), "deferred")])
    assert exposure.get("mcp__git__log") is None
    assert exposure.get("mcp__git__diff") is not None
    assert exposure.get("lookup_weather") is not None


def test_tokenize_splits_snake_kebab_and_camel_case():
    assert tokenize("readFile mcp__dev-radius__search") == [
        "read",
        "file",
        "readfile",
        "mcp",
        "dev",
        "mcp__dev",
        "radius",
        "search",
        "radius__search",
    ]
    assert script_identifier("mcp__dev-radius__search") == "mcp__dev_radius__search"


# --- --tools and mcp__ names (pi docs cli.md "MCP tools") -----------------------------------


def test_tools_without_an_mcp_entry_keep_mcp_tools_reachable_but_undeclared():
    selection = ToolSelection.from_options(tools="read,codemode")
    assert selection.reaches("mcp__radius__search")
    assert "mcp__radius__search" not in selection


def test_an_mcp_entry_in_tools_keeps_only_the_mcp_tools_it_matches():
    selection = ToolSelection.from_options(tools="read,codemode,mcp__radius__*")
    assert selection.reaches("mcp__radius__search")
    assert "mcp__radius__search" in selection
    assert not selection.reaches("mcp__other__search")
    assert not selection.reaches("read_mcp_resource")


def test_exclude_tools_removes_mcp_tools_from_every_path():
    selection = ToolSelection.from_options(exclude_tools="mcp__*")
    assert not selection.reaches("mcp__radius__search")
    assert selection.reaches("read")


def test_tool_search_turns_on_by_itself_unless_the_command_line_removes_it():
    assert ToolSelection.from_options().enables("tool_search")
    assert not ToolSelection.from_options(tools="-tool_search").enables("tool_search")
    assert not ToolSelection.from_options(tools="read").enables("tool_search")
    assert ToolSelection.from_options(tools="read,tool_search").enables("tool_search")
    assert not ToolSelection.from_options(exclude_tools="tool_*").enables("tool_search")
    assert not ToolSelection.from_options(no_tools=True).enables("tool_search")


# --- codemode options and the runner (in process, no sandbox) -------------------------------


def test_the_options_line_is_read_from_the_first_line_only():
    assert parse_options('# @options: {"timeout_s": 5}\nprint(1)') == {"timeout_s": 5}
    assert parse_options("print(1)") == {}
    with pytest.raises(ValueError, match="first line"):
        parse_options('print(1)\n# @options: {"timeout_s": 5}')
    with pytest.raises(ValueError, match="unknown option 'memory'"):
        parse_options('# @options: {"memory": 5}')
    with pytest.raises(ValueError, match="positive"):
        parse_options('# @options: {"timeout_s": -1}')
    with pytest.raises(ValueError, match="not JSON"):
        parse_options("# @options: {timeout}")


class FakeHost:
    """Answers the runner's host calls as the supervisor would."""

    def __init__(self, results: dict[str, dict[str, Any]]) -> None:
        self.results = results
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, op: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        self.calls.append((op, args))
        if op == "codemode.call_tool":
            return self.results[args["name"]]
        if op == "codemode.list_tools":
            return list(self.results)
        return []


def run(script: str, host: Any = None, **params: Any) -> dict[str, Any]:
    return run_script(host or FakeHost({}), {"script": script, **params}, threading.Event())


def test_a_failed_tool_call_raises_tool_error_and_the_script_goes_on():
    host = FakeHost(
        {
            "denied": {
                "content": [{"type": "text", "text": "Blocked by policy"}],
                "is_error": True,
            },
            "fine": {"content": [{"type": "text", "text": "ok"}], "is_error": False},
        }
    )
    outcome = run(
        "try:\n    tools.denied()\nexcept ToolError as e:\n    print('caught', e.text)\n"
        "print(tools.fine(x=1))\nprint(call_tool('denied')['is_error'])\nprint(sorted(dir(tools)))",
        host,
    )
    assert outcome["error"] is None
    assert outcome["output"] == "caught Blocked by policy\nok\nTrue\n['denied', 'fine']\n"
    assert host.calls[1] == ("codemode.call_tool", {"name": "fine", "arguments": {"x": 1}})
    assert outcome["calls"] == 3
    assert issubclass(ToolError, Exception)


def test_long_output_keeps_its_start_and_end():
    outcome = run("for i in range(10000):\n    print(f'line {i}')", max_output_chars=200)
    assert outcome["truncated"]
    assert outcome["output"].startswith("line 0\nline 1\n")
    assert outcome["output"].rstrip().endswith("line 9999")
    assert "chars truncated" in outcome["output"]
    assert len(outcome["output"]) < 300


def test_printing_past_the_hard_limit_stops_the_script_even_through_except_exception():
    script = (
        "while True:\n    try:\n        print('x' * 1000)\n    except Exception:\n        pass\n"
    )
    outcome = run(script, max_output_chars=100, hard_output_chars=50_000)
    assert outcome["error"].startswith("OutputLimitExceeded")
    assert len(outcome["output"]) < 300


def test_script_errors_report_the_script_line_not_the_runner():
    outcome = run("x = 1\nraise ValueError('boom')\n")
    assert outcome["error"] == "  line 2, in <module>\nValueError: boom"
    assert "SyntaxError" in run("def (:\n")["error"]
    assert run("import sys\nprint('a')\nsys.exit(0)\nprint('b')")["output"] == "a\n"


def test_the_codemode_runner_imports_only_the_standard_library_and_the_worker():
    import json
    import subprocess
    import sys

    code = (
        "import sys, json; before = set(sys.modules);"
        "import pi_sandbox.worker.runtime, pi_sandbox.worker.codemode_runner;"
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    foreign = [
        name
        for name in loaded
        if name.split(".")[0] not in sys.stdlib_module_names
        and name != "pi_sandbox"
        and not name.startswith(("pi_sandbox.worker", "pi_sandbox.protocol"))
    ]
    assert foreign == []
