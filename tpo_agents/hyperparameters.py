"""An algorithm's hyperparameters as its class declares them: the shared ones shown on every subclass,
its own ones (what its zip holds beside the shared ones), and the learning rate a mode scales."""

from __future__ import annotations

import inspect
from typing import Any


def show_shared(cls: type, base: type) -> None:
    """Show ``base``'s hyperparameters on ``cls``, an algorithm whose ``__init__`` forwards ``**kwargs`` to
    ``base`` (``TPO(policy, env, eta=1.0, anchor=True, **kwargs)``): its signature lists them as
    keyword-only arguments and its docstring gets their ``:param`` lines, so ``help(TPO)`` and API docs
    show them."""
    init = vars(cls).get("__init__")
    if init is None:
        return
    own = list(inspect.signature(init).parameters.values())
    if not own or own[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        return
    names = {p.name for p in own}
    shared = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
              for p in inspect.signature(base.__init__).parameters.values()
              if p.name not in names and not p.name.startswith("_")]
    init.__signature__ = inspect.signature(init).replace(parameters=own[:-1] + shared)
    if cls.__doc__ and ":param" in (base.__doc__ or ""):
        params = base.__doc__[base.__doc__.index(":param"):].rstrip()
        cls.__doc__ = f"{cls.__doc__.rstrip()}\n\n    Shared hyperparameters:\n\n    {params}\n"


def own_hyperparameters(cls: type, base: type) -> frozenset[str]:
    """The constructor arguments ``cls`` adds to ``base``'s, up its classes."""
    shared = set(inspect.signature(base.__init__).parameters)
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is base:
            break
        if "__init__" in vars(klass):
            params = inspect.signature(vars(klass)["__init__"]).parameters.values()
            names |= {p.name for p in params if p.kind is not p.VAR_KEYWORD}
    return frozenset(names - shared)


class ScaledSchedule:
    """A picklable learning-rate schedule ``scale * base(progress)``."""

    def __init__(self, base: Any, scale: float) -> None:
        self.base, self.scale = base, scale

    def __call__(self, progress_remaining: float) -> float:
        return self.scale * self.base(progress_remaining)
