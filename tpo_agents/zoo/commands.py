"""``tpo-gym``: the zoo's command lines under one installed command, as ``rl_zoo3 train`` is the RL Zoo's.

    tpo-gym train --algo tpo --env TokenReversal -n 2000      # the project's configs, from any folder
    tpo-gym evaluate --algo tpo --env TokenReversal -f logs/ -n 100
    tpo-gym enjoy --algo tpo --env TokenReversal -f logs/ -n 50
    tpo-gym plots -f logs/ -a tpo grpo -e TokenReversal -x updates

Each command hands its arguments, unchanged, to the module that runs it from a checkout (``python
train.py``, ``python -m tpo_agents.evaluate``, ``python -m tpo_agents.enjoy``, ``python -m
tpo_agents.zoo.plots``): the same flags, defaults, errors and ``--help``. A hyperparameter search is
``tpo-gym train -optimize``, as in rl_zoo3. Without ``--hyperparams``, ``train`` reads ``./zoo_configs/``
if the folder holds one, else the configs installed with the package
(:data:`tpo_agents.zoo.hyperparams.PROJECT_CONFIGS`).
"""

from __future__ import annotations

import argparse
import importlib

#: Command -> (``module:function`` that runs it on a list of arguments, one line of help).
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("tpo_agents.zoo.train:main", "train an agent from YAML hyperparameters (-optimize: search)"),
    "evaluate": ("tpo_agents.zoo.evaluate:cli", "the task error, reward and success rate of a saved model"),
    "enjoy": ("tpo_agents.zoo.enjoy:cli", "watch a saved model, episode by episode, in the terminal"),
    "plots": ("tpo_agents.zoo.plots:cli", "learning curves over seeds and a table of the runs' scores"),
}


def build_parser() -> argparse.ArgumentParser:
    """``tpo-gym <command> [its arguments]``; ``--help`` lists the commands."""
    lines = __doc__.splitlines()
    listing = "\n".join(f"  {name:<9} {text}" for name, (_, text) in COMMANDS.items())
    examples = "\n".join(line for line in lines if line.startswith("    tpo-gym"))
    p = argparse.ArgumentParser(prog="tpo-gym", description=lines[0].replace("``", ""),
                                epilog=f"commands:\n{listing}\n\nexamples:\n{examples}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("command", choices=list(COMMANDS), help="what to run (its flags: <command> --help)")
    p.add_argument("arguments", nargs=argparse.REMAINDER, help="the command's own arguments")
    return p


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``tpo-gym`` console script: run the chosen command on the arguments after it."""
    args = build_parser().parse_args(argv)
    module, function = COMMANDS[args.command][0].split(":")
    getattr(importlib.import_module(module), function)(args.arguments)


if __name__ == "__main__":
    main()
