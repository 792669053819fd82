"""The zoo's command line: ``train.py``'s flags with the RL Zoo's names, aliases and defaults.

Flags that mean something other than in rl_zoo3 say so in their help: ``-tb`` defaults to
``<log-folder>/tensorboard`` (rl_zoo3: no TensorBoard), ``-P`` is on by default, ``--wandb-project-name``
defaults to ``tpo-gym`` (rl_zoo3: ``sb3``) and ``--num-threads`` to 1.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from tpo_agents.zoo import hyperparams as hp
from tpo_agents.zoo import optimize, registry
from tpo_agents.zoo.envs import VEC_ENV_CLASSES
from tpo_agents.zoo.run import DEFAULT_TB, EVAL_EPISODES, MAX_TABLES


class StoreDict(argparse.Action):
    """``key:value`` pairs into a dict, each value evaluated as Python (strings may stay bare)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        pairs = {}
        for item in values:
            key, sep, value = item.partition(":")
            if not sep:
                parser.error(f"{option_string} expects key:value pairs, got {item!r}")
            pairs[key] = hp.parse_value(value)
        setattr(namespace, self.dest, pairs)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """``--help`` with each flag's default and the epilog's line breaks kept."""


def epilog() -> str:
    """The end of ``--help``: examples, the algorithms and the ``TPO/`` envs."""
    import tpo_gym

    envs = textwrap.fill(", ".join(tpo_gym.ENV_IDS + tpo_gym.TEXT_ENV_IDS), 100, subsequent_indent="  ")
    algos = textwrap.fill(", ".join(registry.ALGOS), 100, subsequent_indent="  ")
    return (
        "examples:\n"
        "  python train.py --algo tpo --env TokenReversal         # zoo_configs/tpo.yml: Table 1, V = 2\n"
        "  python train.py --algo grpo --env TokenReversal -n 100000 --env-kwargs vocab_size:4\n"
        "  python train.py --algo tpo --env TokenReversal -params eta:0.5 group_mode:sequence --seed 0\n"
        "  python train.py --algo sb3_ppo --env CartPole-v1 -n 50000 -tb ''  # no TensorBoard\n"
        "  python -m tpo_agents.evaluate --algo tpo --env TokenReversal -f logs/  # latest run's task error\n"
        f"\nalgorithms:\n  {algos}\n"
        f"\nenvs (short names work: TokenReversal; SB3's algorithms take any Gymnasium id):\n  {envs}\n"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line, with the RL Zoo's flag names, aliases and defaults."""
    p = argparse.ArgumentParser(
        description="Train any registered algorithm on any env from YAML hyperparameters, RL-Zoo style.",
        prog="train.py", formatter_class=HelpFormatter, epilog=epilog()
    )
    p.add_argument("--algo", type=str, default="tpo", help=f"algorithm, one of: {', '.join(registry.ALGOS)}")
    p.add_argument(
        "--env", type=str, default="TPO/TokenReversal-v0", help="env id or short name (TokenReversal)"
    )
    p.add_argument(
        "-n", "--n-timesteps", type=int, default=-1, help="overrides the YAML n_timesteps when > 0"
    )
    p.add_argument("--seed", type=int, default=-1, help="random seed; -1 draws one (recorded in args.yml)")
    p.add_argument(
        "-tb", "--tensorboard-log", type=str, default=DEFAULT_TB,
        help="TensorBoard root ('' turns it off; rl_zoo3: off)",
    )  # fmt: skip
    p.add_argument("-f", "--log-folder", type=str, default="logs", help="root of the run folders")
    p.add_argument("--eval-freq", type=int, default=25000, help="evaluate every N env steps (<= 0: never)")
    p.add_argument(
        "--eval-episodes", type=int, default=None,
        help=f"episodes per evaluation (None: {EVAL_EPISODES}; -optimize: {optimize.SEARCH_EVAL_EPISODES})",
    )  # fmt: skip
    p.add_argument("--n-eval-envs", type=int, default=1, help="envs of the evaluation VecEnv")
    p.add_argument("--save-freq", type=int, default=-1, help="checkpoint every N env steps (<= 0: never)")
    p.add_argument(
        "-params", "--hyperparams", type=str, nargs="+", default=[],
        help="YAML directory (<dir>/<algo>.yml), YAML file, and/or key:value overrides",
    )  # fmt: skip
    p.add_argument("-conf", "--conf-file", type=str, nargs="+", default=[], help="YAML file or directory")
    p.add_argument("--device", type=str, default="auto", help="PyTorch device (auto, cpu, cuda)")
    p.add_argument("--vec-env", type=str, default="dummy", choices=list(VEC_ENV_CLASSES), help="VecEnv type")
    p.add_argument(
        "-P", "--progress", action=argparse.BooleanOptionalAction, default=True,
        help="progress bar (shown with --verbose 1; on by default, rl_zoo3: off)",
    )  # fmt: skip
    p.add_argument("--verbose", type=int, default=1, help="0: silent, 1: info")
    p.add_argument(
        "--env-kwargs", type=str, nargs="+", action=StoreDict, default={}, help="key:value env kwargs"
    )
    p.add_argument(
        "--eval-env-kwargs", type=str, nargs="+", action=StoreDict, default={}, help="eval env kwargs"
    )
    p.add_argument(
        "--gym-packages", type=str, nargs="+", default=[], help="modules to import (register envs)"
    )
    p.add_argument(
        "-i", "--trained-agent", type=str, default="",
        help="continue training from this .zip (its step count and its run's TensorBoard run)",
    )  # fmt: skip
    p.add_argument(
        "--num-threads", type=int, default=1,
        help="torch threads (the models are small: extra threads only add synchronisation; "
        "0 or less keeps torch's default)",
    )  # fmt: skip
    p.add_argument(
        "--log-interval", type=int, default=-1,
        help=f"print the training table every N updates (TensorBoard gets every update); -1: about "
        f"{MAX_TABLES} tables per run; 0: never; off-policy SB3 algorithms: their log_interval (episodes)",
    )  # fmt: skip
    p.add_argument("-uuid", "--uuid", action="store_true", default=False,
                   help="append a unique id to the run folder's name (<Env>_<N>_<uuid>)")
    p.add_argument("-yaml", "--yaml-file", type=str, default=None,
                   help="a YAML file of hyperparameters (as a file given to --hyperparams)")
    track = p.add_argument_group('Weights & Biases (pip install "tpo-gym[wandb]"; WANDB_MODE=offline works)')
    track.add_argument("--track", action="store_true", default=False,
                       help="mirror the run (TensorBoard logs in runs/<run name>, config, code) to W&B")
    track.add_argument("--wandb-project-name", type=str, default="tpo-gym",
                       help="W&B project (rl_zoo3's default is sb3)")
    track.add_argument("--wandb-entity", type=str, default=None, help="W&B entity (team or user)")
    track.add_argument("--wandb-group", type=str, default=None, help="W&B group of the run")
    track.add_argument("-tags", "--wandb-tags", type=str, nargs="+", default=[], help="W&B tags of the run")
    optimize.add_arguments(p)
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by :func:`build_parser` (``--help`` and argparse errors exit, as in a shell)."""
    return build_parser().parse_args(argv)
