"""``pi auth login|logout|status`` and ``pi --list-models [search]`` (issue 16).

``pi auth login PROVIDER [--api-key]`` reads the key from a no-echo prompt when
stdin is a terminal, else from the first line of stdin — never from the command
line, where ``ps`` and shell history would show it (pi cli.md: "the key is read
without echoing it"). ``pi auth logout PROVIDER`` removes it (exit 0 when nothing was
stored). ``pi auth status`` shows, per provider, where its key comes from (never the
key). Exit status: 0 ok, 2 bad usage or an unsafe/invalid auth.json or models.json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pi_sandbox.errors import UsageError

__all__ = ["auth_main", "list_models_main"]


def _catalogue(agent_dir: Path) -> object:
    from .auth_store import read_auth
    from .models_config import load_catalogue

    return load_catalogue(agent_dir, stored_keys=set(read_auth(agent_dir)))


def _read_key(provider: str) -> str:
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass(f"API key for {provider} (input hidden): ").strip()
    return sys.stdin.readline().strip()


def auth_main(argv: Sequence[str], agent_dir: Path) -> int:
    """``pi auth …`` (module docstring); returns the exit status."""
    argv = list(argv)
    parser = argparse.ArgumentParser(
        prog="pi auth", description="Store, remove and inspect provider API keys."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    login = commands.add_parser(
        "login", help="store an API key (read from stdin or a hidden prompt, never argv)"
    )
    login.add_argument("provider", metavar="PROVIDER")
    login.add_argument(
        "--api-key",
        action="store_true",
        help="store an API key (the only login method here; the key is read, not given)",
    )
    logout = commands.add_parser("logout", help="remove a stored key")
    logout.add_argument("provider", metavar="PROVIDER")
    commands.add_parser("status", help="which providers have keys, and from where")
    if argv[:1] == ["login"]:
        # A key typed after the provider must not be echoed back by argparse's
        # "unrecognized arguments" message (it would land in logs and terminals).
        words = [w for w in argv[1:] if not w.startswith("-")]
        if len(words) > 1:
            print(
                "pi auth login: too many arguments; the key is read from stdin or a "
                "hidden prompt, never from the command line (remove it from your shell "
                "history)",
                file=sys.stderr,
            )
            return 2
        unknown = [
            w for w in argv[1:] if w.startswith("-") and w not in ("--api-key", "-h", "--help")
        ]
        if unknown:
            print("pi auth login: unknown option (only --api-key)", file=sys.stderr)
            return 2
    args = parser.parse_args(argv)
    from .auth_store import AuthStoreError, remove_api_key, resolve_key, store_api_key

    try:
        catalogue = _catalogue(agent_dir)
    except UsageError as exc:
        print(f"pi auth: {exc}", file=sys.stderr)
        return 2
    providers = catalogue.providers  # type: ignore[attr-defined]
    if args.command == "login":
        if args.provider not in providers:
            print(
                f"pi auth login: unknown provider {args.provider!r}; known: "
                f"{', '.join(providers)} (add others in {agent_dir / 'models.json'})",
                file=sys.stderr,
            )
            return 2
        key = _read_key(args.provider)
        if not key:
            print("pi auth login: no key given (empty input)", file=sys.stderr)
            return 2
        try:
            store_api_key(agent_dir, args.provider, key)
        except (AuthStoreError, OSError) as exc:
            print(f"pi auth login: {exc}", file=sys.stderr)
            return 2
        print(f"Stored the {args.provider} key in {agent_dir / 'auth.json'}")
        return 0
    if args.command == "logout":
        try:
            removed = remove_api_key(agent_dir, args.provider)
        except (AuthStoreError, OSError) as exc:
            print(f"pi auth logout: {exc}", file=sys.stderr)
            return 2
        print(
            f"Removed the stored {args.provider} key"
            if removed
            else f"No stored key for {args.provider}"
        )
        return 0
    from .auth_store import read_auth

    try:
        auth = read_auth(agent_dir)
    except AuthStoreError as exc:
        print(f"pi auth status: {exc}", file=sys.stderr)
        return 2
    names = list(dict.fromkeys([*providers, *auth]))
    width = max(len(n) for n in names)
    for name in names:
        info = providers.get(name)
        if info is None:
            print(f"{name:<{width}}  auth.json (not a known provider: unused)")
            continue
        _, source = resolve_key(info, cli_key=None, auth=auth, agent_dir=agent_dir, resolve=False)
        what = "no key" if source.kind == "none" else source.describe()
        if source.kind == "none" and not info.builtin:
            what = "no key (none needed unless the server asks)"
        print(f"{name:<{width}}  {what}")
    return 0


def _tokens(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000:
        return f"{n / 1000:g}K"
    return str(n)


def list_models_main(agent_dir: Path, search: str | None) -> int:
    """``pi --list-models [search]``: a table of the catalogue's models (after the
    user's models.json), filtered by a fuzzy search, then exit. Columns as pi's:
    provider, model, context, max-out, thinking, images, plus prices (USD per
    million tokens, input/output) and whether the provider has a key."""
    from .auth_store import read_auth, resolve_key

    try:
        catalogue = _catalogue(agent_dir)
        auth = read_auth(agent_dir)
    except UsageError as exc:
        print(f"pi: {exc}", file=sys.stderr)
        return 2
    models = catalogue.search(search) if search else catalogue.models()  # type: ignore[attr-defined]
    if not models:
        print(f"No models match {search!r}" if search else "No models")
        return 0
    keyed: dict[str, bool] = {}
    rows = [("provider", "model", "context", "max-out", "thinking", "images", "$in/$out", "key")]
    for m in models:
        if m.provider not in keyed:
            info = catalogue.providers[m.provider]  # type: ignore[attr-defined]
            _, source = resolve_key(
                info, cli_key=None, auth=auth, agent_dir=agent_dir, resolve=False
            )
            keyed[m.provider] = source.kind != "none"
        rows.append(
            (
                m.provider,
                m.id,
                _tokens(m.context_window),
                _tokens(m.max_tokens),
                "yes" if m.reasoning else "no",
                "yes" if "image" in m.input else "no",
                f"{m.cost.get('input', 0):g}/{m.cost.get('output', 0):g}",
                "yes" if keyed[m.provider] else "no",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0
