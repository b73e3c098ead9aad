"""pi-sandbox: a coding agent whose extensions and tools run in sandboxed worker processes.

This package's ``__init__`` must stay import-free: worker processes import
``pi_sandbox.worker`` and ``pi_sandbox.protocol`` only, and every module imported
here would be paid for at every worker start (DESIGN §2).
"""

__all__ = ["__version__"]

__version__ = "0.8.0"
