"""The zoo: train any registered algorithm on any env from YAML hyperparameters, RL-Zoo style.

``python train.py --algo tpo --env TokenReversal --hyperparams zoo_configs/`` is a thin shim over
:func:`train`, which takes the same arguments as a list, so training can be called from Python:
``train(["--algo", "tpo", "--env", "TokenReversal", "-n", "2000"])``.

A run writes ``<log-folder>/<algo>/<Env>_<N>/`` with ``<Env>.zip`` (the final model, also saved on
Ctrl-C), ``monitor.csv``, ``evaluations.npz`` and ``best_model.zip`` (with ``--eval-freq``),
``rl_model_<steps>_steps.zip`` (with ``--save-freq``) and ``<Env>/{config.yml,args.yml,command.txt}``.
TensorBoard runs go to ``<tb>/<Env>/<ALGO>_<k>/`` (a ``-i`` run continues its zip's). The run itself is
built by :mod:`tpo_agents.zoo.run`; ``-optimize`` searches hyperparameters instead
(:mod:`tpo_agents.zoo.optimize`).
"""

from __future__ import annotations

import sys

from tpo_agents.allocator import keep_freed_memory
from tpo_agents.zoo import cli, optimize, run
from tpo_agents.zoo import hyperparams as hp


def configure(argv: list[str]) -> run.RunSetup:
    """The :class:`~tpo_agents.zoo.run.RunSetup` of the command line ``argv`` (parsed, resolved, checked)."""
    args = cli.parse(argv)
    optimize.check_flags(args)
    return run.configure(args)


def train(argv: list[str] | None = None) -> run.TrainResult | optimize.OptimizeResult:
    """Run the zoo with command-line arguments ``argv`` (``sys.argv[1:]`` when ``None``).

    With ``-optimize`` it runs a hyperparameter search instead (:mod:`tpo_agents.zoo.optimize`).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    setup = configure(argv)
    if setup.args.optimize_hyperparameters:
        return optimize.hyperparameter_optimization(setup, argv)
    return run.train_run(setup, argv)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``train.py``: :func:`train` with configuration errors as a one-line message, in a
    process that keeps freed memory for reuse (:func:`tpo_agents.allocator.keep_freed_memory`)."""
    keep_freed_memory()
    try:
        train(argv)
    except hp.ConfigError as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main()
