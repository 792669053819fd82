"""Checks of hyperparameter values, shared by the algorithms' constructors and the zoo.

Each check returns the value unchanged when it is allowed and otherwise raises
:class:`HyperparameterError`, a ``ValueError`` whose message names the value and what is allowed:
``eta=-1: must be a number > 0``. The zoo adds where the value came from
(``eta=-1 (in --hyperparams override): must be a number > 0``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


class HyperparameterError(ValueError):
    """A hyperparameter outside its allowed range or of the wrong type.

    :param name: the hyperparameter (``"eta"``)
    :param value: the value given
    :param allowed: what is allowed, completing "must be ..." (``"a number > 0"``)
    """

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"{name}={value!r}: must be {allowed}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.name, self.value, self.allowed)


def is_number(value: Any) -> bool:
    """True for a finite int or float (numpy scalars included), False for bools, strings, NaN, inf."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        return False
    return math.isfinite(float(value))


def is_integer(value: Any) -> bool:
    """True for an int (numpy integers included), False for bools and floats."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def check_number(name: str, value: Any, low: float, strict: bool = True, high: float | None = None) -> Any:
    """A finite number ``> low`` (``>= low`` when not ``strict``) and ``<= high`` if ``high`` is given."""
    ok = is_number(value) and (value > low if strict else value >= low) and (high is None or value <= high)
    if not ok:
        if high is not None:
            allowed = f"a number in {'(' if strict else '['}{low:g}, {high:g}]"
        else:
            allowed = f"a number {'>' if strict else '>='} {low:g}"
        raise HyperparameterError(name, value, allowed)
    return value


def check_positive(name: str, value: Any) -> Any:
    """A finite number > 0."""
    return check_number(name, value, 0.0, strict=True)


def check_nonnegative(name: str, value: Any) -> Any:
    """A finite number >= 0."""
    return check_number(name, value, 0.0, strict=False)


def check_integer(name: str, value: Any, low: int = 1, why: str = "") -> Any:
    """An integer ``>= low``; ``why`` (e.g. ``" in token mode"``) completes the message."""
    if not is_integer(value) or value < low:
        raise HyperparameterError(name, value, f"an integer >= {low}{why}")
    return value


def check_bool(name: str, value: Any) -> Any:
    """``True`` or ``False``."""
    if not isinstance(value, bool | np.bool_):
        raise HyperparameterError(name, value, "True or False")
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any], why: str = "") -> Any:
    """One of ``choices``; ``why`` (e.g. ``" for DG"``) completes the message."""
    choices = list(choices)
    if value not in choices:
        raise HyperparameterError(name, value, f"one of {', '.join(map(repr, choices))}{why}")
    return value


def check_schedulable(name: str, value: Any) -> Any:
    """A number > 0, or a schedule: a callable of the remaining progress (SB3's ``FloatSchedule`` input).

    The zoo turns ``lin_<v>`` strings into schedules before the constructor sees them.
    """
    if callable(value):
        return value
    if not is_number(value) or value <= 0:
        raise HyperparameterError(name, value, "a number > 0 or a schedule (zoo: lin_<value>)")
    return value


def check_shared_hyperparameters(algorithm: Any, supported_modes: tuple[str, ...], modes: dict[str, Any],
                                 matches: tuple[str, ...]) -> None:
    """Check the hyperparameters every grouped algorithm shares (``GroupBaseAlgorithm``'s), in order:
    ``group_mode`` among ``supported_modes`` first (the others' allowed values depend on its mode, one of
    ``modes``), then ``match`` (one of ``matches``), the sizes, the baseline and the flags."""
    name = type(algorithm).__name__
    check_choice("group_mode", algorithm.group_mode, supported_modes, f" for {name}")
    check_choice("match", algorithm.match, matches)
    check_schedulable("learning_rate", algorithm.learning_rate)
    check_integer("batch_size", algorithm.batch_size)
    check_integer("n_epochs", algorithm.n_epochs)
    mode = modes[algorithm.group_mode]
    low = mode.min_group_size(algorithm.loss_view())
    check_integer("group_size", algorithm.group_size, low, f" in {mode.name} mode" if low > 1 else "")
    if not (algorithm.baseline in ("batch_mean", "expected") or is_number(algorithm.baseline)):
        raise HyperparameterError("baseline", algorithm.baseline, "'batch_mean', 'expected' or a number")
    check_nonnegative("kl_coef", algorithm.kl_coef)
    check_integer("n_seeds", algorithm.n_seeds)
    check_bool("skip_batches_without_signal", algorithm.skip_batches_without_signal)
    if algorithm.skip_batches_without_signal and (algorithm.kl_coef or algorithm.n_seeds > 1):
        raise HyperparameterError(
            "skip_batches_without_signal", True, "False with kl_coef > 0 or n_seeds > 1 (a population "
            "updates its members together; the reference KL has a gradient on any batch)")
    if algorithm.max_grad_norm is not None:
        check_positive("max_grad_norm", algorithm.max_grad_norm)
        if algorithm.n_seeds > 1:
            raise HyperparameterError("max_grad_norm", algorithm.max_grad_norm,
                                      "None with n_seeds > 1 (one norm would mix the members)")
