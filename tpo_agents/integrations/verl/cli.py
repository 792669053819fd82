"""The plugin's command line: check a verl config for TPO, export an env's tasks as parquet files.

``python -m tpo_agents.integrations.verl check CONFIG.yaml [key=value ...]`` and
``python -m tpo_agents.integrations.verl export --env ID --out DIR`` (a text env's splits, or a multi-turn
env's tasks and its ``tools.yaml``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from .checks import config_errors, load_config, summary
from .data import TASKS, export_dataset

__all__ = ["main"]


def _parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``key:value`` items, each value read as the zoo reads ``--env-kwargs`` (Python, else a string)."""
    from tpo_agents.zoo.hyperparams import parse_value

    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key:
            raise ValueError(f"--env-kwargs expects key:value pairs, got {item!r}")
        kwargs[key] = parse_value(value)
    return kwargs


def main(argv: Sequence[str] | None = None) -> int:
    """``check`` a verl config for TPO, or ``export`` an env's parquet files; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m tpo_agents.integrations.verl",
                                     description="TPO's verl plugin: check a config, export an env")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="validate a verl config for the tpo estimator and loss")
    check.add_argument("sources", nargs="+",
                       help="at most one config .yaml and any key=value overrides (hydra syntax)")
    check.add_argument("--no-hydra", action="store_true",
                       help="merge verl 0.9.1's defaults instead of composing with hydra")
    export = commands.add_parser("export", help="write an env's train/test parquet files for verl (and a "
                                                 "multi-turn env's tools.yaml)")
    export.add_argument("--env", required=True,
                        help="a text env (TPO/GraphColor-v0) or a multi-turn one (GuessNumber, Calculator)")
    export.add_argument("--out", required=True, help="output folder")
    export.add_argument("--env-kwargs", nargs="+", default=[],
                        help="key:value env kwargs (size:2000 reward:binary)")
    export.add_argument("--system-prompt", default=None, help="a system message put before every prompt")
    export.add_argument("--tasks", type=int, default=None,
                        help=f"a multi-turn env's tasks per split (default {TASKS}; a text env exports its "
                             "own splits)")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            config = load_config(args.sources, use_hydra=False if args.no_hydra else None)
            errors = config_errors(config)
            for error in errors:
                print(f"error: {error}", file=sys.stderr)
            if errors:
                return 1
            print(summary(config))
        else:
            paths = export_dataset(args.env, args.out, _parse_env_kwargs(args.env_kwargs), args.system_prompt,
                                   args.tasks)
            for name, path in paths.items():
                print(f"{name}: {path}")
    except (ValueError, ModuleNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0
