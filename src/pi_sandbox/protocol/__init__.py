"""The wire protocol between the supervisor and its workers (DESIGN §3).

Newline-delimited JSON-RPC 2.0 over an ``AF_UNIX`` socketpair (the worker's end is
fd 3). This package's ``__init__`` imports nothing: the worker side uses only the
stdlib modules ``framing``, ``methods`` and ``hook_kinds``; ``messages`` (pydantic
models that validate what a worker sends) is imported by the supervisor only.
"""

__all__: list[str] = []
