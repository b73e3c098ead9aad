"""The OS sandbox around workers (DESIGN §6): profiles, bwrap argv, bwrap discovery.

Imports only the stdlib and pydantic (DESIGN §2).
"""

from pi_sandbox.sandbox.bwrap_args import build_bwrap_argv, find_bwrap, probe_bwrap
from pi_sandbox.sandbox.profile import SandboxProfile, worker_profile

__all__ = [
    "SandboxProfile",
    "build_bwrap_argv",
    "find_bwrap",
    "probe_bwrap",
    "worker_profile",
]
