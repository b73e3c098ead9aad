"""The model catalogue, models.json, key precedence, auth.json and cost (issue 16)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from pi_sandbox.errors import UsageError
from pi_sandbox.supervisor.providers import auth_store
from pi_sandbox.supervisor.providers.auth_store import (
    AuthStoreError,
    read_auth,
    remove_api_key,
    resolve_key,
    store_api_key,
)
from pi_sandbox.supervisor.providers.catalogue import (
    add_cost,
    builtin_catalogue,
    split_thinking_suffix,
)
from pi_sandbox.supervisor.providers.model_selection import (
    ProviderFactory,
    choose_model,
    read_model_settings,
    resolve_pattern,
    resolve_scope,
)
from pi_sandbox.supervisor.providers.models_config import (
    ModelsConfigError,
    load_catalogue,
    resolve_value,
)


def write_json(path: Path, data: object, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    path.chmod(mode)
    return path


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# --- the built-in catalogue -------------------------------------------------------


def test_the_builtin_catalogue_lists_anthropic_and_openai_with_prices_and_windows() -> None:
    catalogue = builtin_catalogue()
    assert {"anthropic", "openai"} <= set(catalogue.providers)
    for model in catalogue.models():
        assert model.context_window > 0 and model.max_tokens > 0
        assert set(model.cost) >= {"input", "output", "cacheRead", "cacheWrite"}
        assert model.cost["output"] > 0
        assert model.api in ("anthropic-messages", "openai-completions")
    haiku = catalogue.get("anthropic", "claude-haiku-4-5")
    assert haiku is not None and haiku.reasoning and "image" in haiku.input


def test_a_model_pattern_matches_exact_id_then_name_then_substring() -> None:
    catalogue = builtin_catalogue()
    assert resolve_pattern(catalogue, "gpt-4o")[0].id == "gpt-4o"  # not gpt-4o-mini
    assert resolve_pattern(catalogue, "GPT-4o mini")[0].id == "gpt-4o-mini"  # by name
    assert resolve_pattern(catalogue, "sonnet")[0].id == "claude-sonnet-4-6"  # newest first
    model, level = resolve_pattern(catalogue, "anthropic/claude-haiku-4-5:high")
    assert (model.ref, level) == ("anthropic/claude-haiku-4-5", "high")


def test_an_unlisted_id_of_a_known_provider_is_sent_as_is_without_prices() -> None:
    model, _ = resolve_pattern(builtin_catalogue(), "openai/meta-llama/Llama-3.1-8B")
    assert model.id == "meta-llama/Llama-3.1-8B" and not model.known
    assert model.cost["input"] == 0


def test_a_thinking_suffix_is_split_only_when_it_is_a_level() -> None:
    assert split_thinking_suffix("qwen2.5-coder:7b") == ("qwen2.5-coder:7b", None)
    assert split_thinking_suffix("sonnet:low") == ("sonnet", "low")
    assert split_thinking_suffix("sonnet:max") == ("sonnet", "xhigh")


def test_a_pattern_offered_by_two_providers_asks_for_provider_unless_one_has_a_key(
    tmp_path: Path,
) -> None:
    write_json(
        tmp_path / "models.json",
        {
            "providers": {
                "proxy": {
                    "baseUrl": "http://127.0.0.1:9/v1",
                    "api": "openai-completions",
                    "models": [{"id": "gpt-4o"}],
                }
            }
        },
    )
    catalogue = load_catalogue(tmp_path)
    with pytest.raises(UsageError, match="--provider"):
        resolve_pattern(catalogue, "gpt-4o")
    model, _ = resolve_pattern(catalogue, "gpt-4o", has_key=lambda p: p == "proxy")
    assert model.provider == "proxy"
    assert resolve_pattern(catalogue, "gpt-4o", provider="openai")[0].provider == "openai"


def test_models_globs_and_fuzzy_entries_build_the_cycle_scope() -> None:
    scope = resolve_scope(builtin_catalogue(), ["anthropic/claude-opus-*:high", "gpt-4o-mini"])
    refs = [(m.ref, level) for m, level in scope]
    assert ("anthropic/claude-opus-4-6", "high") in refs
    assert refs[-1] == ("openai/gpt-4o-mini", None)
    with pytest.raises(UsageError, match="nothing-like-this"):
        resolve_scope(builtin_catalogue(), ["nothing-like-this*"])


# --- models.json ------------------------------------------------------------------


def test_a_wrongly_typed_field_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "models.json",
        {"providers": {"ollama": {"models": [{"id": "q", "contextWindow": "big"}]}}},
    )
    with pytest.raises(ModelsConfigError) as caught:
        load_catalogue(tmp_path)
    assert str(path) in str(caught.value)
    assert "providers.ollama.models[0].contextWindow" in str(caught.value)


def test_a_bad_api_key_value_is_reported_without_quoting_it(tmp_path: Path) -> None:
    write_json(tmp_path / "models.json", {"providers": {"x": {"apiKey": 123456789}}})
    with pytest.raises(ModelsConfigError) as caught:
        load_catalogue(tmp_path)
    assert "providers.x.apiKey" in str(caught.value)
    assert "123456789" not in str(caught.value)


def test_a_world_writable_models_json_is_refused(tmp_path: Path) -> None:
    path = write_json(tmp_path / "models.json", {"providers": {}}, 0o666)
    with pytest.raises(ModelsConfigError, match=f"chmod o-w {path}"):
        load_catalogue(tmp_path)


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "models.json").write_text('{"providers": {\n  "x": }\n}')
    with pytest.raises(ModelsConfigError, match=r"models\.json: not valid JSON: line 2"):
        load_catalogue(tmp_path)


def test_a_custom_provider_needs_an_api_and_a_base_url(tmp_path: Path) -> None:
    write_json(tmp_path / "models.json", {"providers": {"x": {"models": [{"id": "m"}]}}})
    with pytest.raises(ModelsConfigError, match=r"providers\.x\.models\[0\]: no 'api'"):
        load_catalogue(tmp_path)
    write_json(
        tmp_path / "models.json",
        {"providers": {"x": {"api": "google-generative-ai", "models": [{"id": "m"}]}}},
    )
    with pytest.raises(ModelsConfigError, match="not supported here"):
        load_catalogue(tmp_path)


def test_overrides_change_a_builtin_model_field_by_field_and_base_url_applies_to_all(
    tmp_path: Path,
) -> None:
    write_json(
        tmp_path / "models.json",
        {
            "providers": {
                "anthropic": {
                    "baseUrl": "https://proxy.example/v1",
                    "modelOverrides": {
                        "claude-haiku-4-5": {"cost": {"input": 9}, "maxTokens": 1000},
                        "no-such-model": {"maxTokens": 1},
                    },
                    "models": [{"id": "claude-custom", "contextWindow": 5000}],
                }
            }
        },
    )
    catalogue = load_catalogue(tmp_path)
    haiku = catalogue.get("anthropic", "claude-haiku-4-5")
    assert haiku.cost["input"] == 9 and haiku.cost["output"] == 5  # merged, not replaced
    assert haiku.max_tokens == 1000
    assert {m.base_url for m in catalogue.providers["anthropic"].models} == {
        "https://proxy.example/v1"
    }
    custom = catalogue.get("anthropic", "claude-custom")
    assert custom.api == "anthropic-messages" and custom.context_window == 5000


def test_a_project_may_not_set_base_url_for_a_builtin_provider(tmp_path: Path) -> None:
    project = tmp_path / "project"
    path = write_json(
        project / ".pi" / "models.json",
        {"providers": {"openai": {"baseUrl": "http://127.0.0.1:9/v1"}}},
    )
    with pytest.raises(ModelsConfigError) as caught:
        load_catalogue(tmp_path / "agent", project_dir=project)
    assert str(path) in str(caught.value) and "providers.openai.baseUrl" in str(caught.value)


def test_a_project_may_not_redirect_a_provider_the_user_stored_a_key_for(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_json(
        project / ".pi" / "models.json",
        {
            "providers": {
                "corp": {
                    "baseUrl": "http://127.0.0.1:9/v1",
                    "api": "openai-completions",
                    "models": [{"id": "m", "headers": {"X-A": "1"}}],
                }
            }
        },
    )
    with pytest.raises(ModelsConfigError, match=r"providers\.corp\.baseUrl"):
        load_catalogue(tmp_path / "agent", project_dir=project, stored_keys={"corp"})
    # Control: without a stored key the project's own provider loads.
    catalogue = load_catalogue(tmp_path / "agent", project_dir=project)
    assert catalogue.providers["corp"].project


def test_a_projects_values_must_be_literal(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_json(
        project / ".pi" / "models.json",
        {
            "providers": {
                "p": {
                    "baseUrl": "http://127.0.0.1:9/v1",
                    "api": "openai-completions",
                    "apiKey": "$OPENAI_API_KEY",
                    "models": [{"id": "m"}],
                }
            }
        },
    )
    with pytest.raises(ModelsConfigError, match=r"providers\.p\.apiKey: a project's values"):
        load_catalogue(tmp_path / "agent", project_dir=project)


def test_the_users_models_json_may_route_a_builtin_provider(tmp_path: Path) -> None:
    write_json(
        tmp_path / "models.json", {"providers": {"openai": {"baseUrl": "http://127.0.0.1:9/v1"}}}
    )
    assert load_catalogue(tmp_path).get("openai", "gpt-4o").base_url == "http://127.0.0.1:9/v1"


def test_config_values_resolve_env_escapes_and_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P3_TOKEN", "tok")
    assert resolve_value("$P3_TOKEN", what="x") == "tok"
    assert resolve_value("Bearer ${P3_TOKEN}", what="x") == "Bearer tok"
    assert resolve_value("a$$b$!c", what="x") == "a$b!c"
    assert resolve_value("literal-key", what="x") == "literal-key"
    assert resolve_value("$P3_UNSET_VARIABLE", what="x") is None
    assert resolve_value("!printf 'from-cmd\\n'", what="x") == "from-cmd"
    assert resolve_value("!exit 3", what="x") is None
    assert resolve_value("!true", what="x") is None  # empty output


# --- keys -------------------------------------------------------------------------


def test_key_precedence_is_flag_then_auth_json_then_models_json_then_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    monkeypatch.setenv("P3_CFG", "from-models-json")
    write_json(tmp_path / "models.json", {"providers": {"openai": {"apiKey": "$P3_CFG"}}})
    info = load_catalogue(tmp_path).providers["openai"]
    auth = {"openai": {"type": "api_key", "key": "from-auth"}}
    assert resolve_key(info, cli_key="from-flag", auth=auth)[0] == "from-flag"
    assert resolve_key(info, cli_key=None, auth=auth)[0] == "from-auth"
    key, source = resolve_key(info, cli_key=None, auth={})
    assert (key, source.kind) == ("from-models-json", "models.json")
    info.api_key = None
    key, source = resolve_key(info, cli_key=None, auth={})
    assert (key, source.describe()) == ("from-env", "env ($OPENAI_API_KEY)")
    monkeypatch.delenv("OPENAI_API_KEY")
    assert resolve_key(info, cli_key=None, auth={})[1].kind == "none"


def test_an_auth_json_command_key_runs_once_per_process(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    info = builtin_catalogue().providers["openai"]
    command = f"!echo x >> {counter}; echo cmd-key"
    auth = {"openai": {"type": "api_key", "key": command}}
    auth_store._run_stored_command.cache_clear()
    assert resolve_key(info, cli_key=None, auth=auth)[0] == "cmd-key"
    assert resolve_key(info, cli_key=None, auth=auth)[0] == "cmd-key"
    assert counter.read_text() == "x\n"


def test_a_public_endpoint_without_any_key_is_a_usage_error_naming_the_ways(
    tmp_path: Path,
) -> None:
    choice, factory = choose_model(agent_dir=tmp_path, project_dir=None, model="claude-haiku-4-5")
    with pytest.raises(UsageError) as caught:
        factory.build(choice.model, initial=True)
    assert "ANTHROPIC_API_KEY" in str(caught.value) and "pi auth login" in str(caught.value)


def test_the_thinking_level_is_clamped_to_off_for_a_model_without_reasoning(
    tmp_path: Path,
) -> None:
    choice, _ = choose_model(agent_dir=tmp_path, project_dir=None, model="gpt-4o-mini:high")
    assert choice.thinking_level == "off"
    choice, _ = choose_model(
        agent_dir=tmp_path, project_dir=None, model="claude-haiku-4-5:high", thinking="low"
    )
    assert choice.thinking_level == "low"  # --thinking beats the suffix


def test_settings_choose_the_default_model_and_level_and_the_project_wins(
    tmp_path: Path,
) -> None:
    agent, project = tmp_path / "agent", tmp_path / "project"
    write_json(agent / "settings.json", {"defaultModel": "gpt-4o", "defaultThinkingLevel": "low"})
    write_json(project / ".pi" / "settings.json", {"defaultModel": "anthropic/claude-opus-4-6"})
    choice, _ = choose_model(agent_dir=agent, project_dir=None, model=None)
    assert choice.model.ref == "openai/gpt-4o" and choice.thinking_level == "off"
    choice, _ = choose_model(agent_dir=agent, project_dir=project, model=None)
    assert choice.model.ref == "anthropic/claude-opus-4-6" and choice.thinking_level == "low"


def test_a_per_model_thinking_level_from_settings_beats_the_default(tmp_path: Path) -> None:
    write_json(
        tmp_path / "settings.json",
        {
            "defaultThinkingLevel": "low",
            "modelThinkingLevels": {"anthropic/claude-haiku-4-5": "high"},
        },
    )
    choice, _ = choose_model(agent_dir=tmp_path, project_dir=None, model="claude-haiku-4-5")
    assert choice.thinking_level == "high"
    choice, _ = choose_model(agent_dir=tmp_path, project_dir=None, model="claude-opus-4-6")
    assert choice.thinking_level == "low"


def test_bad_thinking_budgets_name_the_settings_file(tmp_path: Path) -> None:
    path = write_json(tmp_path / "settings.json", {"thinkingBudgets": {"huge": 5}})
    with pytest.raises(UsageError) as caught:
        read_model_settings(tmp_path, None)
    assert str(path) in str(caught.value) and "thinkingBudgets" in str(caught.value)


def test_a_bad_default_thinking_level_names_the_settings_file(tmp_path: Path) -> None:
    path = write_json(tmp_path / "settings.json", {"defaultThinkingLevel": "loud"})
    with pytest.raises(UsageError) as caught:
        read_model_settings(tmp_path, None)
    assert str(path) in str(caught.value) and "defaultThinkingLevel" in str(caught.value)


def test_a_project_provider_refuses_a_users_key(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_json(
        project / ".pi" / "models.json",
        {
            "providers": {
                "p": {
                    "baseUrl": "http://127.0.0.1:9/v1",
                    "api": "openai-completions",
                    "models": [{"id": "m"}],
                }
            }
        },
    )
    catalogue = load_catalogue(tmp_path / "agent", project_dir=project)
    factory = ProviderFactory(catalogue, agent_dir=tmp_path / "agent", cli_key="sk-user")
    with pytest.raises(UsageError, match="may not choose where your key is sent"):
        factory.build(catalogue.get("p", "m"), initial=True)
    # Control: without --api-key the project's provider runs keyless.
    factory = ProviderFactory(catalogue, agent_dir=tmp_path / "agent")
    assert factory.build(catalogue.get("p", "m"), initial=True).name == "p"


# --- auth.json --------------------------------------------------------------------


def test_store_api_key_writes_0600_atomically_and_keeps_other_entries(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    store_api_key(agent, "openai", "k1")
    store_api_key(agent, "anthropic", "k2")
    path = agent / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(agent.stat().st_mode) == 0o700
    assert read_auth(agent) == {
        "openai": {"type": "api_key", "key": "k1"},
        "anthropic": {"type": "api_key", "key": "k2"},
    }
    assert sorted(p.name for p in agent.iterdir()) == ["auth.json"]
    assert remove_api_key(agent, "openai") is True
    assert remove_api_key(agent, "openai") is False
    assert set(read_auth(agent)) == {"anthropic"}


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = tmp_path / "agent"
    store_api_key(agent, "openai", "old")

    def broken_dump(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(auth_store.json, "dump", broken_dump)
    with pytest.raises(OSError):
        store_api_key(agent, "openai", "new")
    monkeypatch.undo()
    assert read_auth(agent)["openai"]["key"] == "old"
    assert sorted(p.name for p in agent.iterdir()) == ["auth.json"]


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o666])
def test_an_auth_json_others_may_access_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = write_json(tmp_path / "auth.json", {"openai": {"type": "api_key", "key": "k"}}, mode)
    with pytest.raises(AuthStoreError) as caught:
        read_auth(tmp_path)
    assert f"chmod 600 {path}" in str(caught.value)
    assert '"k"' not in str(caught.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_an_auth_json_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    path = write_json(tmp_path / "auth.json", {"openai": {"type": "api_key", "key": "k"}})
    os.chown(path, 65534, 65534)
    with pytest.raises(AuthStoreError, match="owned by uid 65534"):
        read_auth(tmp_path)


def test_a_malformed_auth_json_is_reported_without_its_content(tmp_path: Path) -> None:
    (tmp_path / "auth.json").write_text('{"openai": {"type": "api_key", "key": "sk-secret"')
    (tmp_path / "auth.json").chmod(0o600)
    with pytest.raises(AuthStoreError) as caught:
        read_auth(tmp_path)
    assert "sk-secret" not in str(caught.value) and "not valid JSON" in str(caught.value)


# --- cost -------------------------------------------------------------------------


def test_cost_is_tokens_times_price_per_million_for_each_kind() -> None:
    usage = {"input": 1_000_000, "output": 500_000, "cacheRead": 2_000_000, "cacheWrite": 100_000}
    prices = {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}
    out = add_cost(usage, prices)
    assert out["cost"] == pytest.approx(
        {"input": 3.0, "output": 7.5, "cacheRead": 0.6, "cacheWrite": 0.375, "total": 11.475}
    )
    assert out["totalTokens"] == 3_600_000
    assert usage == {
        "input": 1_000_000,
        "output": 500_000,
        "cacheRead": 2_000_000,
        "cacheWrite": 100_000,
    }


def test_the_highest_matching_price_tier_prices_the_whole_request() -> None:
    prices = {
        "input": 3,
        "output": 15,
        "cacheRead": 0,
        "cacheWrite": 0,
        "tiers": [
            {
                "inputTokensAbove": 200_000,
                "input": 6,
                "output": 22.5,
                "cacheRead": 0,
                "cacheWrite": 0,
            }
        ],
    }
    assert add_cost({"input": 100_000}, prices)["cost"]["input"] == pytest.approx(0.3)
    assert add_cost({"input": 300_000, "output": 1000}, prices)["cost"]["total"] == pytest.approx(
        1.8 + 0.0225
    )


# --- wiring into the providers' constructors (p1's and p2's keyword arguments) ----


class _Recorder:
    """Stands in for a provider class whose constructor takes the keyword arguments
    the other branches add; records what it was given."""

    calls: list = []

    def __init__(
        self,
        model,
        base_url,
        api_key,
        *,
        compat=None,
        max_tokens=None,
        model_max_tokens=None,
        reasoning=None,
        headers=None,
        provider_name="x",
        thinking_budgets=None,
    ):
        type(self).calls.append(
            dict(
                model=model,
                base_url=base_url,
                api_key=api_key,
                compat=compat,
                max_tokens=max_tokens,
                model_max_tokens=model_max_tokens,
                reasoning=reasoning,
                headers=headers,
                provider_name=provider_name,
                thinking_budgets=thinking_budgets,
            )
        )
        self.model = model


class _Compat:
    def __init__(self, base, overrides=None):
        self.base, self.overrides = base, overrides

    @classmethod
    def detect(cls, base_url):
        return cls(base_url)

    def with_overrides(self, overrides):
        if overrides.get("thinkingFormat") == "zai":
            raise ValueError("compat.thinkingFormat: 'zai' is not supported here")
        return _Compat(self.base, dict(overrides))


def test_models_json_compat_max_tokens_reasoning_and_headers_reach_the_openai_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_sandbox.supervisor.providers import openai as openai_module

    monkeypatch.setattr(openai_module, "OpenAIProvider", _Recorder)
    monkeypatch.setattr(openai_module, "OpenAICompat", _Compat, raising=False)
    monkeypatch.setattr(_Recorder, "calls", [])
    monkeypatch.setenv("P3_HDR", "v1")
    write_json(
        tmp_path / "models.json",
        {
            "providers": {
                "vllm": {
                    "baseUrl": "http://127.0.0.1:8000/v1",
                    "api": "openai-completions",
                    "compat": {"supportsDeveloperRole": False},
                    "headers": {"X-H": "$P3_HDR"},
                    "models": [
                        {
                            "id": "m",
                            "reasoning": True,
                            "maxTokens": 4096,
                            "compat": {"maxTokensField": "max_tokens"},
                        }
                    ],
                }
            }
        },
    )
    choice, factory = choose_model(agent_dir=tmp_path, project_dir=None, model="vllm/m")
    provider = factory.build(choice.model, initial=True)
    (call,) = _Recorder.calls
    assert call["compat"].base == "http://127.0.0.1:8000/v1"
    assert call["compat"].overrides == {
        "supportsDeveloperRole": False,
        "maxTokensField": "max_tokens",
    }
    assert (call["max_tokens"], call["reasoning"], call["headers"]) == (4096, True, {"X-H": "v1"})
    assert provider.name == "vllm"
    # An unlisted id leaves max_tokens and reasoning to the provider's own defaults.
    choice, factory = choose_model(agent_dir=tmp_path, project_dir=None, model="vllm/other")
    factory.build(choice.model, initial=True)
    assert (_Recorder.calls[-1]["max_tokens"], _Recorder.calls[-1]["reasoning"]) == (None, None)


def test_a_bad_compat_value_is_a_usage_error_naming_the_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_sandbox.supervisor.providers import openai as openai_module

    monkeypatch.setattr(openai_module, "OpenAIProvider", _Recorder)
    monkeypatch.setattr(openai_module, "OpenAICompat", _Compat, raising=False)
    write_json(
        tmp_path / "models.json",
        {
            "providers": {
                "p": {
                    "baseUrl": "http://127.0.0.1:9/v1",
                    "api": "openai-completions",
                    "compat": {"thinkingFormat": "zai"},
                    "models": [{"id": "m"}],
                }
            }
        },
    )
    choice, factory = choose_model(agent_dir=tmp_path, project_dir=None, model="p/m")
    with pytest.raises(UsageError, match=r"providers\.p: compat\.thinkingFormat"):
        factory.build(choice.model, initial=True)


def test_an_anthropic_model_gets_capped_max_tokens_reasoning_and_its_provider_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    module = types.ModuleType("pi_sandbox.supervisor.providers.anthropic")
    module.AnthropicProvider = _Recorder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pi_sandbox.supervisor.providers.anthropic", module)
    monkeypatch.setattr(_Recorder, "calls", [])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    write_json(tmp_path / "settings.json", {"thinkingBudgets": {"low": 2048, "high": 20000}})
    choice, factory = choose_model(agent_dir=tmp_path, project_dir=None, model="claude-opus-4-6")
    provider = factory.build(choice.model, initial=True)
    (call,) = _Recorder.calls
    assert call["base_url"] == "https://api.anthropic.com"
    assert call["api_key"] == "sk-ant-env"
    assert (call["max_tokens"], call["model_max_tokens"]) == (32000, 128000)
    assert call["reasoning"] is True and call["provider_name"] == "anthropic"
    assert call["thinking_budgets"] == {"low": 2048, "high": 20000}
    assert provider.name == "anthropic"
