"""The policy file schema (version 1): strict pydantic models of the YAML.

These spellings are a public contract (DESIGN §7): later tiers and sections are
added without renaming anything here. Every model forbids unknown keys; scalars
are not coerced (``version: "1"`` is an error, not version 1); an explicit
``null`` is an error wherever a value is expected.

Sections implemented: ``tool_call`` and ``sandbox``::

    version: 1
    tool_call:
      default: allow        # allow | ask | deny, when no rule matches
      unparseable: ask      # for a shell command that cannot be parsed with confidence
      rules:
        - id: no-recursive-rm
          tool: bash                 # name or fnmatch glob, or a list of them
          command: [rm, -rf]         # argv prefix of any simple command
          command_regex: "..."       # re.search on the whole command text
          path: ["**/.env"]          # path globs (see _path_glob)
          arguments: {content: "..."}  # re.search on named string arguments
          decision: deny
          reason: Recursive deletes are not allowed.
          examples: {match: [...], not_match: [...]}
    sandbox:
      filesystem: {workspace: write, writable_roots: [], read_only: [],
                   deny_read: [], deny_write: []}
      network: {mode: none, allow: [], deny: []}     # none | allowlist
      limits: {address_space_mb: 16384, memory_mb: 4096, processes: 512,
               open_files: 4096, file_size_mb: 4096, cpu_seconds: 600,
               tmp_size_mb: 512, tool_timeout_s: 600}
      environment: {allow: []}
      sockets: [/run/docker.sock]   # Unix sockets bound in (managed/user tiers only)
    extensions:
      project: allow        # allow | deny: whether project extensions may load at all
      allow: []             # names or path globs; when given, only matching extensions load
      deny: []              # names or path globs; never load
      capabilities:         # name or path glob -> capabilities (every matching entry applies)
        "*": {override_builtin_tools: false, send_user_messages: true, ui: true,
              exec: true, network: false}
    trust:
      default: ask          # ask | no | sandboxed | yes, when neither --trust nor the store decides
      users_may_trust: yes  # yes | sandboxed (never full trust) | no (projects are never trusted)
    audit:
      file: /var/log/pi/audit.jsonl   # absolute or ~/...; records are appended
      include: [tool_call, tool_call_outcome, sandbox_profile, egress, trust, extension, policy, mcp]
      arguments: true       # include the (redacted) tool-call arguments
    lock: [sandbox]         # sections lower tiers may not set (issue 4 tiers)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import regex
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pi_sandbox.policies._extension_limits import ExtensionLimitsSection
from pi_sandbox.policies._mcp import McpSection

__all__ = [
    "SUPPORTED_VERSION",
    "AuditSection",
    "Decision",
    "Example",
    "ExtensionCapabilities",
    "ExtensionsSection",
    "PolicyFile",
    "RuleExamples",
    "SandboxSection",
    "ToolCallRule",
    "ToolCallSection",
    "TrustSection",
]

SUPPORTED_VERSION = 1

Decision = Literal["allow", "ask", "deny"]


def _number_not_bool(value: Any) -> Any:
    # YAML's true/false would otherwise pass as 1/0 for a float field.
    if isinstance(value, bool):
        raise ValueError("expected a number of seconds, not a boolean")
    return value


def _not_null(value: Any) -> Any:
    if value is None:
        raise PydanticCustomError("null", "expected a value, got null")
    return value


def _one_or_many(value: Any) -> Any:
    if value is None:
        raise PydanticCustomError("null", "expected a value, got null")
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list):
        raise PydanticCustomError("str_or_list", "expected a string or a list of strings")
    return value


def _valid_regex(pattern: str) -> str:
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise PydanticCustomError(
            "invalid_regex",
            "invalid regular expression {pattern}: {error}",
            {"pattern": repr(pattern), "error": str(exc)},
        ) from exc
    return pattern


def _valid_example(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return value
    raise PydanticCustomError(
        "example_type", "an example must be a string or a mapping of tool arguments"
    )


NonEmptyStr = Annotated[StrictStr, Field(min_length=1)]
RuleId = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
Regex = Annotated[StrictStr, AfterValidator(_valid_regex)]
Patterns = Annotated[tuple[NonEmptyStr, ...], BeforeValidator(_one_or_many), Field(min_length=1)]
Example = Annotated[Any, AfterValidator(_valid_example)]
ArgvPrefix = Annotated[tuple[NonEmptyStr, ...], Field(min_length=1)]
ArgumentMatchers = Annotated[dict[NonEmptyStr, Regex], Field(min_length=1)]


def _supported_version(version: int) -> int:
    if version != SUPPORTED_VERSION:
        raise PydanticCustomError(
            "unsupported_version",
            "unsupported version {version} (this pi-sandbox reads version {supported})",
            {"version": version, "supported": SUPPORTED_VERSION},
        )
    return version


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleExamples(_Strict):
    """Self-test cases checked when the file is loaded.

    A string example is a bash command for rules with ``command``/``command_regex``,
    a path for rules with ``path``, the argument's value for rules with a single
    ``arguments`` entry; a mapping example is the whole arguments object, for
    rules that combine several kinds of matchers.
    """

    match: Annotated[tuple[Example, ...], BeforeValidator(_not_null)] = ()
    not_match: Annotated[tuple[Example, ...], BeforeValidator(_not_null)] = ()


class ToolCallRule(_Strict):
    """One rule of ``tool_call.rules``. It matches when ``tool`` matches and every
    matcher given matches; with no matcher it matches every call of the tool."""

    id: RuleId
    tool: Patterns
    command: Annotated[ArgvPrefix | None, BeforeValidator(_not_null)] = None
    # Issue 13 §6: "options" reads options as a set (docs/policy.md, "Option
    # grammar"); "literal" compares the words as written, one by one.
    command_match: Literal["options", "literal"] = "options"
    command_regex: Annotated[Regex | None, BeforeValidator(_not_null)] = None
    path: Annotated[Patterns | None, BeforeValidator(_not_null)] = None
    arguments: Annotated[ArgumentMatchers | None, BeforeValidator(_not_null)] = None
    decision: Decision
    reason: NonEmptyStr
    examples: Annotated[RuleExamples, BeforeValidator(_not_null)] = RuleExamples()

    @model_validator(mode="after")
    def _literal_needs_command(self) -> ToolCallRule:
        if self.command_match == "literal" and self.command is None:
            raise PydanticCustomError(
                "literal_without_command", "command_match: literal needs a command matcher"
            )
        return self


class ToolCallSection(_Strict):
    """The ``tool_call`` section: the gate in front of every tool call (DESIGN §5)."""

    default: Decision = "allow"
    unparseable: Decision = "ask"
    rules: tuple[ToolCallRule, ...] = ()


def _valid_policy_path(path: str) -> str:
    if "\0" in path:
        raise PydanticCustomError("nul_path", "path contains a NUL byte")
    if any(char in path for char in "*?["):
        raise PydanticCustomError(
            "glob_path", "sandbox paths are plain paths, not globs: {path}", {"path": repr(path)}
        )
    return path


def _valid_host_pattern(pattern: str) -> str:
    from pi_sandbox.sandbox.network_rules import validate_host_pattern

    try:
        return validate_host_pattern(pattern)
    except ValueError as exc:
        raise PydanticCustomError("host_pattern", "{error}", {"error": str(exc)}) from exc


# Host variables that must never cross into a sandbox, whatever a policy says
# (issue 3: no provider keys, no SSH_AUTH_SOCK, no *_TOKEN).
_SECRET_NAME = regex.compile(
    r"(?i)(TOKEN|SECRET|PASS|PWD$|CREDENTIAL|AUTH|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|_KEY$|"
    r"_PAT$|JWT|COOKIE|SESSION|DSN|DATABASE_URL|_URI$|^SSH_|^GPG_|^AWS_|^AZURE_|"
    r"^GOOGLE_APPLICATION|^GH_|^GITHUB_|^NPM_|^PYPI_|^TWINE_|^DOCKER_|^KUBE)"
)


def _valid_env_name(name: str) -> str:
    if not regex.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise PydanticCustomError(
            "env_name", "not an environment variable name: {name}", {"name": repr(name)}
        )
    if _SECRET_NAME.search(name):
        raise PydanticCustomError(
            "env_secret",
            "{name} looks like a credential; credentials never enter the sandbox",
            {"name": name},
        )
    return name


PolicyPath = Annotated[NonEmptyStr, AfterValidator(_valid_policy_path)]
PolicyPaths = Annotated[tuple[PolicyPath, ...], BeforeValidator(_not_null)]
HostPattern = Annotated[NonEmptyStr, AfterValidator(_valid_host_pattern)]
HostPatterns = Annotated[tuple[HostPattern, ...], BeforeValidator(_not_null)]
EnvName = Annotated[NonEmptyStr, AfterValidator(_valid_env_name)]


class FilesystemSection(_Strict):
    """``sandbox.filesystem``: what the workers may see and write (DESIGN §6).

    Paths are absolute, ``~/…`` or relative to the workspace."""

    workspace: Literal["write", "read"] = "write"
    # issue 14 §2: "commit" lets the tool worker write a repository's objects, refs,
    # index and logs; its config, hooks and pointers stay read-only. "read" keeps
    # every git directory read-only. Any policy file saying "read" wins.
    git: Literal["commit", "read"] = "commit"
    writable_roots: PolicyPaths = ()
    read_only: PolicyPaths = ()
    deny_read: PolicyPaths = ()
    deny_write: PolicyPaths = ()


class NetworkSection(_Strict):
    """``sandbox.network``: ``none`` (default) or an allowlist enforced by the
    supervisor's egress proxy. An empty allowlist means no network."""

    mode: Literal["none", "allowlist"] = "none"
    allow: HostPatterns = ()
    deny: HostPatterns = ()

    @model_validator(mode="after")
    def _allow_needs_allowlist(self) -> NetworkSection:
        if self.mode == "none" and self.allow:
            raise PydanticCustomError(
                "network_contradiction",
                "allow entries are given but mode is none; set mode: allowlist or remove them",
            )
        return self


def _between(low: int, high: int) -> Any:
    return Annotated[StrictInt, Field(ge=low, le=high)]


class LimitsSection(_Strict):
    """``sandbox.limits``: per-worker resource limits (see ``SandboxLimits``).

    Bounds: below the lower one a Python worker cannot start (it needs about
    200 MiB of address space, 64 descriptors, a few threads); above the upper one
    the kernel refuses the value or the limit means nothing.
    """

    address_space_mb: _between(512, 16 * 1024 * 1024) | None = None  # type: ignore[valid-type]
    memory_mb: _between(128, 16 * 1024 * 1024) | None = None  # type: ignore[valid-type]
    processes: _between(16, 4_194_304) | None = None  # type: ignore[valid-type]
    open_files: _between(64, 1_048_576) | None = None  # type: ignore[valid-type]
    file_size_mb: _between(1, 8 * 1024 * 1024) | None = None  # type: ignore[valid-type]
    cpu_seconds: _between(1, 7 * 24 * 3600) | None = None  # type: ignore[valid-type]
    tmp_size_mb: _between(1, 1024 * 1024) | None = None  # type: ignore[valid-type]
    tool_timeout_s: _between(1, 7 * 24 * 3600) | None = None  # type: ignore[valid-type]


class EnvironmentSection(_Strict):
    """``sandbox.environment``: host variables passed into the sandbox."""

    allow: Annotated[tuple[EnvName, ...], BeforeValidator(_not_null)] = ()


def _absolute_or_home(path: str, code: str, what: str) -> str:
    """``path`` when it is absolute or starts with ``~/``; else a validation error
    ``code`` saying ``what`` must be so (a relative path would depend on where pi
    is started)."""
    if not (path.startswith("/") or path.startswith("~/")):
        raise PydanticCustomError(
            code, what + " must be absolute or start with ~/, got {path}", {"path": repr(path)}
        )
    return path


def _valid_socket_path(path: str) -> str:
    return _absolute_or_home(path, "socket_path", "a socket path")


SocketPaths = Annotated[
    tuple[Annotated[PolicyPath, AfterValidator(_valid_socket_path)], ...],
    BeforeValidator(_not_null),
]


class SandboxSection(_Strict):
    """The ``sandbox`` section: the input to every worker's sandbox profile.

    ``required: true`` makes every run under this policy sandboxed, as if
    ``--sandbox`` were given (a run that cannot sandbox then stops); without it the
    rest of the section only applies to runs with ``--sandbox``.

    ``sockets``: host Unix sockets (docker, an ssh-agent) bound into trusted
    workers, each listed in the audit log's ``sandbox_profile`` records. Only
    managed and user files may set it; ``filesystem.read_only`` refuses sockets,
    devices and FIFOs (issue 13 §5).
    """

    required: StrictBool = False

    filesystem: Annotated[FilesystemSection, BeforeValidator(_not_null)] = FilesystemSection()
    network: Annotated[NetworkSection, BeforeValidator(_not_null)] = NetworkSection()
    limits: Annotated[LimitsSection, BeforeValidator(_not_null)] = LimitsSection()
    environment: Annotated[EnvironmentSection, BeforeValidator(_not_null)] = EnvironmentSection()
    sockets: SocketPaths = ()


Glob = Annotated[NonEmptyStr, AfterValidator(lambda value: _valid_glob(value))]


def _valid_glob(pattern: str) -> str:
    if "\0" in pattern:
        raise PydanticCustomError("nul_glob", "pattern contains a NUL byte")
    if pattern.count("[") != pattern.count("]"):
        raise PydanticCustomError(
            "impossible_glob", "unbalanced brackets in glob {pattern}", {"pattern": repr(pattern)}
        )
    return pattern


Globs = Annotated[tuple[Glob, ...], BeforeValidator(_not_null)]

CAPABILITIES = (
    "override_builtin_tools",
    "send_user_messages",
    "ui",
    "exec",
    "network",
    "set_model",
    "register_providers",
)
"""Extension capabilities a policy can grant or withhold, in documentation order."""


class ExtensionCapabilities(_Strict):
    """What an extension may do beyond handling events (issue 4 ``extensions``).

    Unset fields leave the capability to other entries and tiers; across every
    entry that matches an extension, in every file, ``false`` wins. Defaults
    (no entry sets it): ``override_builtin_tools`` false, ``network`` false, the
    others true. A project extension loaded with ``sandboxed`` trust gets none of
    them, whatever the policy says (issue 5).
    """

    override_builtin_tools: StrictBool | None = None
    send_user_messages: StrictBool | None = None
    ui: StrictBool | None = None
    exec: StrictBool | None = None
    network: StrictBool | None = None
    set_model: StrictBool | None = None
    register_providers: StrictBool | None = None


class ExtensionsSection(_Strict):
    """The ``extensions`` section: which extensions may load, and what they may do.

    ``allow``/``deny``/``capabilities`` keys are extension names (the file's stem or
    the package directory's name) or, when they contain ``/``, globs on the
    extension's canonical path.
    """

    project: Literal["allow", "deny"] = "allow"
    handler_timeout_s: (
        Annotated[float, Field(ge=0.1, le=3600), BeforeValidator(_number_not_bool)] | None
    ) = None
    allow: Annotated[Globs | None, BeforeValidator(_not_null)] = None
    deny: Globs = ()
    capabilities: Annotated[
        dict[Glob, Annotated[ExtensionCapabilities, BeforeValidator(_not_null)]],
        BeforeValidator(_not_null),
    ] = Field(default_factory=dict)
    # issue 13 §2: guards that must be active; honoured from managed/user tiers only.
    required: Globs = ()
    on_load_error: Literal["stop", "continue"] | None = None
    # issue 13 §4: sizes and rates of what an extension hands the supervisor
    # (keys, defaults and tier rules in _extension_limits).
    limits: Annotated[ExtensionLimitsSection, BeforeValidator(_not_null)] = ExtensionLimitsSection()


def _trust_word(value: Any) -> Any:
    # YAML 1.1 reads yes/no as booleans; in a trust field they can only mean the words.
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return value


TrustDecision = Annotated[Literal["ask", "no", "sandboxed", "yes"], BeforeValidator(_trust_word)]
UserTrust = Annotated[Literal["yes", "sandboxed", "no"], BeforeValidator(_trust_word)]


class TrustSection(_Strict):
    """The ``trust`` section (DESIGN §8; issue 6 uses it for the trust store).

    ``default`` decides when neither ``--trust`` nor the trust store does (``ask``
    becomes ``no`` without a UI). ``users_may_trust``: ``yes`` any decision,
    ``sandboxed`` only ``sandboxed`` or ``no``, ``no`` projects are never trusted.
    """

    default: TrustDecision = "ask"
    users_may_trust: UserTrust = "yes"


AUDIT_RECORDS = (
    "tool_call",
    "tool_call_outcome",
    "policy_approval",
    "sandbox_profile",
    "egress",
    "trust",
    "extension",
    "policy",
    "device_repaired",
    "quarantine",
    "run",
    # issue 19: one per codemode script (its nested calls are tool_call records with
    # parent_tool_call_id).
    "codemode_script",
    # issue 19: MCP server refusals, the environment names a server got.
    "mcp",
)
"""The audit record kinds (the ``event`` field of each line)."""


def _valid_audit_file(path: str) -> str:
    _valid_policy_path(path)
    return _absolute_or_home(path, "audit_path", "audit.file")


class AuditSection(_Strict):
    """The ``audit`` section: where records go and which records are written."""

    file: Annotated[NonEmptyStr | None, AfterValidator(lambda v: v and _valid_audit_file(v))] = None
    include: Annotated[
        tuple[Literal[AUDIT_RECORDS], ...], BeforeValidator(_not_null)  # type: ignore[valid-type]
    ] = AUDIT_RECORDS
    arguments: StrictBool = True


SECTIONS = ("tool_call", "sandbox", "extensions", "trust", "audit", "mcp")
"""The sections a higher tier can ``lock``."""


class PolicyFile(_Strict):
    """A validated policy file. Load one with :func:`load_policy_file`.

    Attributes:
        version: always ``SUPPORTED_VERSION`` (1).
        tool_call: the tool-call gate section.
        sandbox: the sandbox section, or None when the file has none.
        source: the file it was loaded from (None when validated from a dict).
    """

    version: Annotated[StrictInt, AfterValidator(_supported_version)]
    tool_call: ToolCallSection = ToolCallSection()
    sandbox: Annotated[SandboxSection | None, BeforeValidator(_not_null)] = None
    extensions: Annotated[ExtensionsSection | None, BeforeValidator(_not_null)] = None
    trust: Annotated[TrustSection | None, BeforeValidator(_not_null)] = None
    audit: Annotated[AuditSection | None, BeforeValidator(_not_null)] = None
    # issue 19: MCP servers (policies/_mcp.py).
    mcp: Annotated[McpSection | None, BeforeValidator(_not_null)] = None
    lock: Annotated[
        tuple[Literal[SECTIONS], ...], BeforeValidator(_one_or_many)  # type: ignore[valid-type]
    ] = ()

    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source
