"""The supervisor: agent session, worker pool, tool pipeline, providers, sessions, modes.

Runs in the ``pi`` process only; it is the one place that holds secrets, writes
session files and evaluates policy (DESIGN §1). It never imports extension code.
"""

__all__: list[str] = []
