"""Code that runs inside a worker process (DESIGN §1–§3).

Import-light by contract: modules here import only the standard library and
``pi_sandbox.protocol``'s stdlib modules (enforced by
``tests/unit/test_worker_imports.py``). Extension authors use ``pi_sandbox.worker.api``.
"""

__all__: list[str] = []
