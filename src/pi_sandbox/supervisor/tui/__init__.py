"""The interactive mode's terminal UI (issue 18).

`TerminalFrontend` is one more consumer of the session's event stream (the same
event dicts ``--mode json`` prints) and drives the `SessionHost` exactly as
``--mode rpc`` does (`pi_sandbox.supervisor.modes.rpc_mode.serve_rpc`): there is no second
path into the agent loop. The screen itself is a prompt_toolkit application in a
thread of its own (`pi_sandbox.supervisor.tui.app`); prompt_toolkit and rich are
imported only when the interactive mode starts.
"""

from pi_sandbox.supervisor.tui.frontend import TerminalFrontend

__all__ = ["TerminalFrontend"]
