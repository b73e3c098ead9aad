"""Entry point: ``python -I -B -m pi_sandbox.worker`` (the channel is fd 3)."""

from pi_sandbox.worker.runtime import main

raise SystemExit(main())
