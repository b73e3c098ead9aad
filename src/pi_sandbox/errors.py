"""The exception hierarchy of pi-sandbox (supervisor side).

Tree::

    PiSandboxError
    ├── ProtocolError            a peer sent a frame that is not valid JSON-RPC or breaks a limit
    ├── WorkerError
    │   ├── WorkerStartError     the worker process could not be spawned or failed its handshake
    │   ├── WorkerCrashedError   the worker process exited or its channel broke mid-request
    │   ├── WorkerTimeoutError   a request passed its deadline ($/cancel is sent; the answer is dropped)
    │   ├── RemoteError          the worker answered with an error; carries the remote traceback text
    │   └── HookFailedError      a fail-closed extension hook failed: what it protects did not happen
    ├── StaleContextError        a message from an invalidated worker generation
    ├── HostCallError            an extension's action (host/call) was refused; carries the wire code
    ├── SandboxError
    │   └── SandboxUnavailableError  a sandbox is required and bwrap cannot run here
    ├── PolicyError
    │   └── PolicyFileError      a policy file is malformed (names file, line and key)
    ├── ProviderError            the model provider failed (HTTP status, stream error, script exhausted)
    └── UsageError               bad command-line input (exit code 2)

A denied tool call is an outcome, not an exception. Foreign exceptions (httpx,
OSError from bwrap, pydantic) are translated at the boundary with ``raise … from``.
"""

from __future__ import annotations

__all__ = [
    "AuditLogError",
    "HookFailedError",
    "HostCallError",
    "PiSandboxError",
    "PolicyError",
    "PolicyFileError",
    "ProtocolError",
    "ProviderError",
    "RemoteError",
    "SandboxError",
    "SandboxUnavailableError",
    "StaleContextError",
    "UsageError",
    "WorkerCrashedError",
    "WorkerError",
    "WorkerStartError",
    "WorkerTimeoutError",
]


class PiSandboxError(Exception):
    """Root of every error pi-sandbox raises on purpose."""


class ProtocolError(PiSandboxError):
    """A peer broke the wire protocol (bad framing, oversized frame, invalid message)."""


class WorkerError(PiSandboxError):
    """A worker process failed."""


class WorkerStartError(WorkerError):
    """The worker could not be spawned or did not complete its handshake."""


class WorkerCrashedError(WorkerError):
    """The worker exited, or its channel broke, while a request was outstanding."""


class WorkerTimeoutError(WorkerError):
    """A request to a worker passed its deadline; ``$/cancel`` was sent and a late answer is dropped."""


class RemoteError(WorkerError):
    """The worker answered a request with an error.

    Attributes:
        code: the JSON-RPC error code.
        remote_traceback: the worker-side traceback as text (never an unpickled object).
    """

    def __init__(self, message: str, *, code: int = -32000, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.remote_traceback = remote_traceback


class HookFailedError(WorkerError):
    """A handler of a fail-closed event (``hook_kinds.ON_FAILURE``: ``input``,
    ``before_agent_start``, ``context``, ``before_provider_request``, ``message_end``)
    failed, so the prompt or provider request it protects was not sent (issue 13 §1).
    The message names the extension and the failure."""


class StaleContextError(PiSandboxError):
    """A message arrived from, or was sent to, an invalidated worker generation."""


class HostCallError(PiSandboxError):
    """An extension's action (``host/call``) was refused or failed.

    Attributes:
        code: the wire error code (``methods.ERROR_STALE``, ``ERROR_CAPABILITY``,
            ``ERROR_HOST``, ``ERROR_INVALID_PARAMS``); the worker turns it into
            ``StaleContextError``, ``CapabilityError`` or ``HostError``.
    """

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


class SandboxError(PiSandboxError):
    """The sandbox could not be set up as the profile requires."""


class SandboxUnavailableError(SandboxError):
    """A sandbox is required (``--sandbox``, or ``--trust sandboxed``) but bubblewrap cannot run here."""


class PolicyError(PiSandboxError):
    """A policy could not be applied."""


class PolicyFileError(PolicyError):
    """A policy file is malformed. The message names the file, the line and the key."""


class ProviderError(PiSandboxError):
    """The model provider failed: HTTP error status, broken stream, or an exhausted script.

    The keyword attributes are the contract between a provider and the retry layer
    (``supervisor/providers/retry.py``, issue 16 "Retries"); every provider that talks
    to a network sets them, a provider that does not (``scripted``) leaves the defaults,
    which mean "not retryable".

    Attributes:
        status: the HTTP status of the answer, or None (no answer, or a stream error).
        retry_after: seconds the server asked to wait before trying again (from
            ``retry-after-ms``, else ``Retry-After`` as seconds or an HTTP date;
            ``retry.parse_retry_after``), or None when it said nothing usable.
        transient: the failure is of a retryable class: HTTP 408, 409, 429, 500, 502,
            503, 504, 529, a refused or reset connection, a connection closed or an
            idle stream — each only while ``output_started`` is False — or a
            mid-stream "overloaded"/"rate limit" error event before any output.
        output_started: the answer had begun (a text, thinking or tool-call delta was
            received) when it failed; such a failure is never retried, because the
            retry would repeat output already shown (docs/providers.md).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        transient: bool = False,
        output_started: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.transient = transient
        self.output_started = output_started


class UsageError(PiSandboxError):
    """Bad command-line input; the CLI exits with status 2."""


class AuditLogError(PiSandboxError):
    """An audit record could not be written where losing it is not allowed (CI mode)."""
