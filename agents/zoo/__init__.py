"""The RL Zoo face of tpo-gym: command line, YAML hyperparameters, env building, callbacks, evaluation.

``train.py`` and ``python -m agents.evaluate`` are thin shims over :func:`agents.zoo.train.main` and
:func:`agents.zoo.evaluate.main`; :func:`train` runs the zoo from Python with a list of arguments.
"""

from agents.zoo.train import main, train

__all__ = ["main", "train"]
