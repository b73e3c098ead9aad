"""The scripted provider, its script validation, and ``create_provider``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import pi_sandbox.supervisor.providers as providers
from pi_sandbox.errors import ProviderError, UsageError
from pi_sandbox.supervisor.providers import (
    OpenAIProvider,
    ScriptedProvider,
    ToolCall,
    create_provider,
)
from pi_sandbox.supervisor.providers.scripted import load_script

TWO_TURNS = """\
- text: "Let me read it."
  tool_calls:
    - name: read
      arguments: {path: README.md}
    - name: bash
      arguments: {command: ls -la}
      id: my_call
- text: "All done."
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "script.yaml"
    path.write_text(text, encoding="utf-8")
    return path


async def ask(provider: ScriptedProvider, on_text_delta=None):
    with trio.fail_after(5):
        return await provider.complete(
            system_prompt="sys", messages=[], tools=[], on_text_delta=on_text_delta
        )


async def test_each_complete_returns_the_next_turn_in_order(tmp_path: Path) -> None:
    provider = ScriptedProvider(write(tmp_path, TWO_TURNS))

    first = await ask(provider)
    second = await ask(provider)

    assert first.text == "Let me read it."
    assert first.tool_calls == [
        ToolCall(id="call_1_0", name="read", arguments={"path": "README.md"}),
        ToolCall(id="my_call", name="bash", arguments={"command": "ls -la"}),
    ]
    assert first.stop_reason == "toolUse"
    assert (second.text, second.tool_calls, second.stop_reason) == ("All done.", [], "stop")
    assert (second.provider, second.model) == ("scripted", "scripted")
    assert (provider.name, provider.model) == ("scripted", "scripted")


async def test_text_is_streamed_through_the_delta_callback(tmp_path: Path) -> None:
    provider = ScriptedProvider(write(tmp_path, TWO_TURNS))
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    turn = await ask(provider, on_delta)

    assert "".join(deltas) == turn.text == "Let me read it."


async def test_a_tool_only_turn_has_empty_text_and_sends_no_delta(tmp_path: Path) -> None:
    provider = ScriptedProvider(write(tmp_path, "- tool_calls: [{name: ls, arguments: {}}]\n"))
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    turn = await ask(provider, on_delta)

    assert (turn.text, turn.stop_reason, deltas) == ("", "toolUse", [])


async def test_running_out_of_turns_raises_instead_of_hanging(tmp_path: Path) -> None:
    path = write(tmp_path, TWO_TURNS)
    provider = ScriptedProvider(path)
    await ask(provider)
    await ask(provider)

    with pytest.raises(ProviderError) as caught:
        await ask(provider)

    assert str(caught.value) == f"script {path} has no turn left for request 3 (it has 2 turns)"
    assert provider.turns_left == 0


async def test_complete_is_a_cancellation_point(tmp_path: Path) -> None:
    provider = ScriptedProvider(write(tmp_path, TWO_TURNS))
    with trio.CancelScope() as scope:
        scope.cancel()
        await ask(provider)
        pytest.fail("complete() returned inside a cancelled scope")
    assert provider.turns_left == 2


def test_load_script_returns_the_validated_turns(tmp_path: Path) -> None:
    turns = load_script(write(tmp_path, TWO_TURNS))
    assert [t.text for t in turns] == ["Let me read it.", "All done."]
    assert [c.id for c in turns[0].tool_calls] == ["call_1_0", "my_call"]


def test_an_empty_list_is_a_valid_script_that_is_exhausted_at_once(tmp_path: Path) -> None:
    assert load_script(write(tmp_path, "[]\n")) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", "the top level must be a list of turns, got an empty file", id="empty"),
        pytest.param("text: hi\n", "the top level must be a list of turns, got a dict", id="map"),
        pytest.param("- text: hi\n- 42\n", "turn 2 (line 2): a turn must be a mapping", id="int"),
        pytest.param("- text: hi\n-\n", "turn 2 (line 2): a turn must be a mapping", id="null"),
        pytest.param(
            "- text: hi\n  txet: oops\n", "turn 1 (line 1): field txet: Extra inputs", id="key"
        ),
        pytest.param("- text: 42\n", "turn 1 (line 1): field text: Input should be", id="type"),
        pytest.param("- {}\n", "turn 1 (line 1): a turn needs `text` or `tool_calls`", id="bare"),
        pytest.param(
            "- text: a\n- tool_calls: {name: x}\n",
            "turn 2 (line 2): field tool_calls: Input should be a valid list",
            id="calls-not-list",
        ),
        pytest.param(
            "- tool_calls:\n  - arguments: {}\n",
            "turn 1 (line 1): field tool_calls[0].name: Field required",
            id="no-name",
        ),
        pytest.param(
            "- tool_calls:\n  - {name: x}\n",
            "field tool_calls[0].arguments: Field required",
            id="no-arguments",
        ),
        pytest.param(
            "- tool_calls:\n  - {name: x, arguments: [1]}\n",
            "field tool_calls[0].arguments: Input should be a valid dictionary",
            id="arguments-list",
        ),
        pytest.param(
            "- tool_calls:\n  - {name: x, arguments: {}, id: 7}\n",
            "field tool_calls[0].id: Input should be a valid string",
            id="id-int",
        ),
        pytest.param(
            "- tool_calls:\n  - {name: x, arguments: {when: 2024-01-01}}\n",
            "field tool_calls[0].arguments: must be JSON-compatible",
            id="arguments-date",
        ),
        pytest.param(
            "- tool_calls:\n  - {name: x, arguments: {}, id: a}\n"
            "- tool_calls:\n  - {name: y, arguments: {}, id: a}\n",
            "turn 2 (line 3): field tool_calls[0].id: 'a' is already used in turn 1",
            id="duplicate-id",
        ),
    ],
)
def test_a_malformed_script_names_the_file_turn_and_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProviderError) as caught:
        ScriptedProvider(path)
    message = str(caught.value)
    assert message.startswith(f"script {path}:")
    assert expected in message


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, '- text: "ok"\n- text: "unterminated\n')
    with pytest.raises(ProviderError, match=r"line 3, column 1: invalid YAML") as caught:
        ScriptedProvider(path)
    assert str(path) in str(caught.value)


def test_a_missing_script_file_is_a_provider_error(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="cannot read script"):
        ScriptedProvider(tmp_path / "nope.yaml")


# --- create_provider and the package surface --------------------------------------


def test_the_providers_package_exports_exactly_its_public_names() -> None:
    assert sorted(providers.__all__) == [
        "AnthropicProvider",
        "AssistantTurn",
        "OpenAIProvider",
        "Provider",
        "ScriptedProvider",
        "ToolCall",
        "ToolDefinition",
        "create_provider",
    ]
    for name in providers.__all__:
        assert hasattr(providers, name)


def test_create_provider_builds_a_scripted_provider_from_the_script(tmp_path: Path) -> None:
    provider = create_provider("scripted", script=write(tmp_path, TWO_TURNS))
    assert isinstance(provider, ScriptedProvider)
    assert provider.turns_left == 2


def test_scripted_without_a_script_is_a_usage_error_naming_the_flag() -> None:
    with pytest.raises(UsageError, match="--script"):
        create_provider("scripted", script=None)


def test_an_unknown_provider_is_a_usage_error_listing_the_known_ones() -> None:
    with pytest.raises(UsageError, match="--model") as caught:
        create_provider("gemini/pro")
    assert "openai" in str(caught.value)
    assert "scripted" in str(caught.value)


def test_openai_without_a_model_id_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="openai/gpt-4o-mini"):
        create_provider("openai", api_key="k")


def test_openai_takes_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    provider = create_provider("openai/meta-llama/Llama-3.1-8B")
    assert isinstance(provider, OpenAIProvider)
    assert provider.model == "meta-llama/Llama-3.1-8B"
    assert provider.base_url == "https://api.openai.com/v1"
    assert "sk-from-env" not in repr(provider)


def test_openai_against_the_default_endpoint_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        create_provider("openai/gpt-4o-mini")


def test_openai_against_a_local_server_may_have_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    provider = create_provider("openai/qwen", base_url="http://127.0.0.1:11434/v1/")
    assert isinstance(provider, OpenAIProvider)
    assert provider.base_url == "http://127.0.0.1:11434/v1"


# --- issue 13 §4: the same YAML bounds as policy files -------------------------------------

ALIAS_BOMB = "".join(
    f"- text: &{name} [{', '.join([prev] * 10)}]\n"
    for name, prev in zip("abcdef", ['"x"', "*a", "*b", "*c", "*d", "*e"], strict=True)
)


@pytest.mark.parametrize(
    ("script", "words"),
    [
        (ALIAS_BOMB, "more than 100000 YAML nodes"),
        ("- &a [*a]\n", "recursive YAML alias"),
        ("- text: " + "[" * 300 + "]" * 300 + "\n", "nested deeper than 256 levels"),
    ],
    ids=["alias bomb", "recursive alias", "deep nesting"],
)
def test_a_script_past_the_yaml_bounds_is_refused_before_it_is_built(tmp_path, script, words):
    path = tmp_path / "script.yaml"
    path.write_text(script)
    with pytest.raises(ProviderError, match=rf"script {path}: line \d+.*{words}"):
        load_script(path)


def test_scripts_and_policy_files_share_one_bounded_walker():
    import pi_sandbox.bounded_yaml as bounded_yaml
    import pi_sandbox.policies._loading as loading
    import pi_sandbox.supervisor.providers.scripted as scripted

    assert scripted.index_yaml is loading.index_yaml is bounded_yaml.index_yaml
    assert (loading.MAX_NODES, loading.MAX_DEPTH) == (
        bounded_yaml.MAX_NODES,
        bounded_yaml.MAX_DEPTH,
    )


def test_a_script_with_aliases_inside_the_bounds_still_loads(tmp_path):
    path = tmp_path / "script.yaml"
    path.write_text("- text: &t hello\n- text: *t\n")
    assert [t.text for t in load_script(path)] == ["hello", "hello"]
