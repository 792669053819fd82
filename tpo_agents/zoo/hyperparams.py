"""Hyperparameters for the zoo: YAML directories and files, ``key:value`` overrides, checks, preprocessing.

Sources, from lowest to highest precedence (order on the command line does not matter):

1. a directory ``D`` (``--hyperparams zoo_configs/``), read as ``D/<algo>.yml``; without one, the
   default: ``./zoo_configs/`` or the project's own (:func:`default_dir`), also under a file given alone;
2. a YAML file (``.yml``/``.yaml``) or a Python file with a ``hyperparams`` dict;
3. ``key:value`` overrides (``learning_rate:1e-4 group_mode:token``).

Each file contributes the entry of the env id, or its ``default`` entry (and says so). The env kwargs
of a ``default`` entry (``env_kwargs``, ``eval_env_kwargs``) were written for the envs that file is about:
they apply only to an env whose constructor takes every one of their keys, and are dropped (with a
note) for any other env, so that a ``default`` written for the token tasks leaves CartPole alone.
Dict-valued keys (``env_kwargs``, ``eval_env_kwargs``) merge key by key, except that a new ``dataset``
drops the keys written for the old one (:func:`merge_env_kwargs`); every other key replaces.
The explicit flags (``-n``, ``--env-kwargs``, ``--seed``, ...) sit above all of these and are applied
by the zoo.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import importlib.util
import inspect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

import yaml

from tpo_agents import checks

#: Keys the zoo consumes itself; they never reach the algorithm's constructor.
ZOO_KEYS = frozenset(
    {
        "n_timesteps",
        "n_envs",
        "env_kwargs",
        "eval_env_kwargs",
        "normalize",
        "callback",
        "monitor_kwargs",
        "env_wrapper",
        "vec_env_wrapper",
        "frame_stack",
    }
)
#: Constructor arguments the zoo sets from its flags; a YAML file may not set them.
FLAG_KEYS = frozenset(
    {"env", "tensorboard_log", "seed", "verbose", "device", "_init_setup_model", "monitor_dir"}
)
#: The zoo's env pipeline: SB3's algorithms get it; an algorithm that builds its own env cannot.
ENV_PIPELINE_KEYS = ("n_envs", "normalize", "frame_stack", "env_wrapper", "vec_env_wrapper", "monitor_kwargs")
#: Keys whose ``lin_<value>`` strings become a linear decay from ``value`` to 0 (``delta_std``: ARS).
SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf", "delta_std")
#: Constructor keys given as Python strings in YAML (evaluated with ``nn``/``th`` in scope), as in the RL Zoo.
EVALUATED_KEYS = ("policy_kwargs", "replay_buffer_kwargs")
#: Constructor keys whose dotted-path strings (``package.module.Name``) are imported, as in the RL Zoo.
IMPORTED_KEYS = ("policy", "replay_buffer_class")
#: Dict-valued keys that merge key by key across sources.
MERGED_KEYS = ("env_kwargs", "eval_env_kwargs")
#: The project's configs (the paper's hyperparameters), package data of ``tpo_agents.zoo``: ``configs/``
#: beside this module in a checkout, an editable install and site-packages alike. A checkout's root names
#: the folder ``zoo_configs/`` too (a link), so that ``--hyperparams zoo_configs/`` reads it there.
PROJECT_CONFIGS = Path(__file__).resolve().parent / "configs"
#: Where a run without ``--hyperparams``/``--conf-file`` looks for ``<algo>.yml``.
DEFAULT_DIRS = (Path("zoo_configs"), PROJECT_CONFIGS)

_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_OVERRIDE = re.compile(r"^([A-Za-z_]\w*):(.*)$", re.DOTALL)


class ConfigError(ValueError):
    """A problem in the hyperparameters: the message names the key and the file."""


def one_line(err: BaseException) -> str:
    """``err`` in one line: its type and the first line of its message."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


@dataclass
class Hyperparams:
    """Merged hyperparameters and, for each key, the source it came from."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    #: The env the values are for (a new ``dataset`` drops the old one's kwargs: :func:`merge_env_kwargs`).
    env_id: str | None = None
    verbose: int = 0
    #: The config files read, lowest first.
    files: list[str] = field(default_factory=list)

    def update(self, entry: dict[str, Any], origin: str) -> None:
        """Merge ``entry`` on top (the dicts of :data:`MERGED_KEYS` key by key: :func:`merge_env_kwargs`)."""
        for key, value in entry.items():
            if key in MERGED_KEYS and isinstance(evaluated(value), dict):
                lower = evaluated(self.values.get(key))
                if isinstance(lower, dict):
                    said = (f"the {key} of {self.origins[key]}", origin) if self.verbose else None
                    value = merge_env_kwargs(self.env_id, lower, evaluated(value), said)
            self.values[key] = value
            self.origins[key] = origin


def merge_env_kwargs(
    env_id: str | None, lower: dict[str, Any], upper: dict[str, Any], said: tuple[str, str] | None = None
) -> dict[str, Any]:
    """``lower`` env kwargs updated with ``upper``. Where ``upper`` switches the ``dataset`` of an env that
    passes the kwargs it does not name to its dataset (``TPO/ReasoningGym-v0``), ``lower``'s kwargs of that
    kind were written for the old dataset and are dropped; the env's named kwargs (``reward``, ``size``,
    ``seed``, ...) are kept. ``said``: (where ``lower``, where ``upper`` came from), to print what is
    dropped."""
    from tpo_agents.zoo.registry import env_signature

    switched = "dataset" in upper and upper["dataset"] != lower.get("dataset")
    signature = env_signature(env_id) if switched and env_id else None
    if signature is None or not signature[1]:
        return {**lower, **upper}
    dropped = sorted(key for key in lower if key not in signature[0] and key not in upper)
    if dropped and said:
        print(f"Not using {', '.join(dropped)} of {said[0]}: they configure dataset "
              f"{lower.get('dataset')!r}, and {said[1]} switches it to {upper['dataset']!r}")
    return {**{key: value for key, value in lower.items() if key not in dropped}, **upper}


TORCH_NAMES = ("nn", "th", "torch")
"""The names a value may use for torch (``nn.ReLU``, ``th.float64``)."""


def parse_value(text: str) -> Any:
    """Evaluate an override's value as Python (``1e-4``, ``True``, ``dict(a=1)``, ``nn.ReLU``); else keep
    the string. torch is imported only for a value that names it (:data:`TORCH_NAMES`), so that reading
    a config (the multi-seed runner's parent process) does not import it."""
    try:
        code = compile(text, "<value>", "eval")
    except SyntaxError:
        return text
    scope: dict[str, Any] = {}
    if _names(code) & set(TORCH_NAMES):
        import torch

        scope = {"nn": torch.nn, "th": torch, "torch": torch}
    try:
        return eval(code, scope)  # noqa: S307 (zoo semantics)
    except Exception:
        return text


def _names(code: CodeType) -> set[str]:
    """The global and attribute names ``code`` and the code it nests (a lambda, a comprehension) read."""
    nested = (const for const in code.co_consts if isinstance(const, CodeType))
    return set(code.co_names).union(*map(_names, nested))


def split_sources(values: list[str]) -> tuple[list[Path], list[Path], dict[str, Any]]:
    """Sort ``--hyperparams``/``--conf-file`` values into directories, files and ``key:value`` overrides."""
    dirs: list[Path] = []
    files: list[Path] = []
    overrides: dict[str, Any] = {}
    for value in values:
        path = Path(value)
        match = _OVERRIDE.match(value)
        if path.is_dir():
            dirs.append(path)
        elif path.is_file():
            files.append(path)
        elif match is not None:
            overrides[match.group(1)] = parse_value(match.group(2))
        elif value.endswith(("/", ".yml", ".yaml", ".py")):
            raise ConfigError(f"Hyperparameter file or directory not found: {value} (the project's own, "
                              f"read without --hyperparams: {PROJECT_CONFIGS})")
        else:
            raise ConfigError(f"Cannot read {value!r}: expected a directory, a .yml/.py file or key:value")
    return dirs, files, overrides


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML file (or a Python file's ``hyperparams`` dict); a syntax error names file and line."""
    if path.suffix == ".py":
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        data = getattr(module, "hyperparams", None)
    else:
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
            problem = getattr(err, "problem", None) or str(err)
            context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
            if context and start is not None:
                problem += f" ({context} at line {start.line + 1})"
            raise ConfigError(f"{where}: invalid YAML: {problem}") from err
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(
            f"{path}: expected a mapping from env ids (or 'default') to mappings of hyperparameters"
        )
    return data


def select_entry(
    data: dict[str, Any], env_id: str, path: Path, algo: str, verbose: int = 1
) -> dict[str, Any]:
    """The env's entry of a config file, or its ``default`` entry (printing that it falls back)."""
    if env_id in data:
        return copy.deepcopy(data[env_id])
    if "default" in data:
        if verbose:
            print(f"No entry for {env_id} in {path}: using its 'default' hyperparameters")
        return copy.deepcopy(data["default"])
    raise ConfigError(
        f"Hyperparameters not found for {algo}-{env_id} in {path} (no such key, no 'default')."
        f"{key_hint(list(data), env_id)}"
    )


def key_hint(keys: list[Any], env_id: str) -> str:
    """The end of the message of a config file without ``env_id``'s key: the key to write instead of one
    that names the env another way (a short name ``TokenReversal``, ``TPO/TokenReversal``, another case)
    or of a name no env has that comes close to its id (a typo); ``""`` when none does."""
    from tpo_agents.zoo.registry import resolve_env_id

    unknown = []
    for key in map(str, keys):
        try:
            if resolve_env_id(key.rpartition(":")[2]) == env_id:  # no module import for a hint
                return f" The key {key!r} must be the full env id: write {env_id!r}."
        except ValueError:
            unknown.append(key)
    close = difflib.get_close_matches(env_id, unknown, n=1)
    return f" Did you mean {env_id!r} for the key {close[0]!r}?" if close else ""


def default_dir() -> Path:
    """``zoo_configs/`` of the working directory if it exists, else the project's own."""
    for candidate in DEFAULT_DIRS:
        if candidate.is_dir():
            return candidate
    raise ConfigError("No hyperparameters given and no zoo_configs/ directory found; pass --hyperparams")


def load_hyperparams(sources: list[str], algo: str, env_id: str, verbose: int = 1) -> Hyperparams:
    """Merge the hyperparameters of ``algo`` on ``env_id`` from ``sources`` (see the module docstring).

    Without a directory, the default one (:func:`default_dir`) is the lowest layer: a file given alone
    (``-params my.yml``) sets its keys over ``zoo_configs/<algo>.yml``'s entry, as a ``key:value`` does.
    """
    dirs, files, overrides = split_sources(sources)
    hyper = Hyperparams(env_id=env_id, verbose=verbose)
    for path, required in directory_layers(dirs, files, algo) + [(path, True) for path in files]:
        entry = file_entry(path, algo, env_id, required, verbose)
        if entry is not None:
            hyper.files.append(str(path))
            hyper.update(entry, str(path))
    hyper.update(overrides, "--hyperparams override")
    return hyper


def directory_layers(dirs: list[Path], files: list[Path], algo: str) -> list[tuple[Path, bool]]:
    """The ``<dir>/<algo>.yml`` files under the given files, each with whether it must hold the env: the
    given directories; else the default one (:func:`default_dir`), which under a file given alone
    serves only where it exists and has an entry for the env (or a ``default``)."""
    if dirs:
        return [(folder / f"{algo}.yml", True) for folder in dirs]
    if not files:
        return [(default_dir() / f"{algo}.yml", True)]
    return [(folder / f"{algo}.yml", False) for folder in DEFAULT_DIRS if folder.is_dir()][:1]


def file_entry(path: Path, algo: str, env_id: str, required: bool, verbose: int = 1) -> dict[str, Any] | None:
    """The entry of ``env_id`` (or ``default``) in the config file ``path``; a missing file or entry is an
    error if ``required``, else None (the default directory under a file given alone)."""
    if not path.is_file():
        if not required:
            return None
        raise ConfigError(f"No hyperparameter file for algorithm {algo!r}: {path} does not exist")
    data = read_config_file(path)
    if not required and env_id not in data and "default" not in data:
        return None
    entry = select_entry(data, env_id, path, algo, verbose)
    if env_id not in data:
        drop_foreign_env_kwargs(entry, env_id, path, verbose)
    return entry


def drop_foreign_env_kwargs(entry: dict[str, Any], env_id: str, path: Path, verbose: int = 1) -> None:
    """Remove a ``default`` entry's env kwargs that ``env_id`` does not take (all of them, with a note)."""
    from tpo_agents.zoo.registry import env_kwarg_names

    accepted = env_kwarg_names(env_id)
    for key in MERGED_KEYS:
        kwargs = evaluated(entry.get(key))
        if accepted is None or not isinstance(kwargs, dict):
            continue
        foreign = sorted(set(kwargs) - accepted)
        if foreign:
            del entry[key]
            if verbose:
                print(
                    f"Not using the 'default' {key} of {path} on {env_id}: it takes no {', '.join(foreign)}"
                )


def constructor_keys(algo_cls: type) -> set[str] | None:
    """Keyword arguments the algorithm's constructor accepts, following ``**kwargs`` up the MRO.

    ``None`` when every class up to ``object`` forwards ``**kwargs`` (then any key is accepted).
    """
    keys: set[str] = set()
    for klass in algo_cls.__mro__:
        if klass is object:
            return None
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        keys |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return keys - {"self"}
    return None


def check_keys(hyper: Hyperparams, algo_cls: type, algo: str) -> None:
    """Reject a key that neither the zoo nor ``algo``'s constructor knows, naming the key and its file."""
    accepted = constructor_keys(algo_cls)
    allowed = None if accepted is None else (accepted - FLAG_KEYS) | ZOO_KEYS
    for key in hyper.values:
        if key in FLAG_KEYS:
            raise ConfigError(
                f"{key!r} (in {hyper.origins[key]}) is set by a command-line flag, not a hyperparameter"
            )
        if allowed is not None and key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"Unknown hyperparameter {key!r} for algorithm {algo!r} ({algo_cls.__name__}) "
                f"in {hyper.origins[key]}.{hint}"
            )


def check_required(hyper: Hyperparams, algo_cls: type, algo: str) -> None:
    """Refuse hyperparameters that lack an argument ``algo``'s constructor requires (``policy``), naming
    the sources read, before the constructor's own ``missing 1 required positional argument``."""
    params = inspect.signature(algo_cls.__init__).parameters.values()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    required = [p.name for p in params if p.kind in kinds and p.default is p.empty and p.name != "self"]
    for key in required:
        if key not in FLAG_KEYS and key not in hyper.values:
            read = f"none of {', '.join(hyper.files)} sets it" if hyper.files else "no config file was read"
            raise ConfigError(f"No {key!r} for {algo} on {hyper.env_id}: {read}; set {key} in the YAML entry "
                              f"or pass -params {key}:<value>")


def check_env_pipeline(hyper: Hyperparams, algo_cls: type, algo: str) -> None:
    """Reject env-pipeline keys for an algorithm that builds its own env (``owns_env``), naming the key."""
    if not getattr(algo_cls, "owns_env", False):
        return
    for key in ENV_PIPELINE_KEYS:
        value = hyper.values.get(key)
        if value is not None and value is not False:
            raise ConfigError(
                f"{key}={value!r} (in {hyper.origins[key]}) cannot be used with {algo!r}: it collects groups "
                f"from its own natively batched env (batch_size x group_size sub-envs); "
                f"{', '.join(ENV_PIPELINE_KEYS)} apply to SB3's algorithms only"
            )


def _at_least(low: int) -> Any:
    return lambda name, value: checks.check_integer(name, value, low)


def _fraction(name: str, value: Any) -> Any:
    return checks.check_number(name, value, 0.0, strict=False, high=1.0)


def _optional_positive(name: str, value: Any) -> Any:
    return value if value is None else checks.check_positive(name, value)


def _entropy_coef(name: str, value: Any) -> Any:
    if isinstance(value, str) and value.startswith("auto"):  # SAC-style learned coefficient
        return value
    return checks.check_nonnegative(name, value)


#: Checks of the hyperparameters SB3's algorithms share (their constructors check few values, some
#: only at the first update); the grouped algorithms check theirs in their constructors.
SB3_VALUE_CHECKS: dict[str, Any] = {
    "learning_rate": checks.check_schedulable,
    "clip_range": checks.check_schedulable,
    "n_steps": _at_least(1),
    "batch_size": _at_least(1),
    "n_epochs": _at_least(1),
    "n_envs": _at_least(1),
    "buffer_size": _at_least(1),
    "learning_starts": _at_least(0),
    "gamma": _fraction,
    "gae_lambda": _fraction,
    "tau": _fraction,
    "vf_coef": checks.check_nonnegative,
    "max_grad_norm": checks.check_positive,
    "target_kl": _optional_positive,
    "ent_coef": _entropy_coef,
}


def value_error(err: checks.HyperparameterError, hyper: Hyperparams) -> ConfigError:
    """``err`` as a one-line :class:`ConfigError` that also names the value's source, with the value as
    written there (``batch_size='100'``, not the number it was read as):
    ``eta=-1 (in --hyperparams override): must be a number > 0``."""
    origin = hyper.origins.get(err.name)
    where = f" (in {origin})" if origin else ""
    written = hyper.values.get(err.name, err.value) if origin else err.value
    return ConfigError(f"{err.name}={written!r}{where}: must be {err.allowed}")


def check_values(hyper: Hyperparams, algo_cls: type) -> None:
    """Check the types and ranges of the values before anything is built: ``n_timesteps`` and ``n_envs``
    for every algorithm, :data:`SB3_VALUE_CHECKS` for an SB3 algorithm (a grouped algorithm, which owns
    its env, checks its own in its constructor), ``lin_<v>`` schedules (v a number > 0) and the
    :data:`EVALUATED_KEYS` (a dict, or a string that evaluates to one)."""
    own = bool(getattr(algo_cls, "owns_env", False))
    try:
        for key, value in hyper.values.items():
            if key in SCHEDULE_KEYS and isinstance(value, str) and value.startswith("lin_"):
                start = as_number(value.split("_", 1)[1])
                if not checks.is_number(start) or start <= 0:
                    raise checks.HyperparameterError(key, value, "a number > 0 or lin_<a number > 0>")
            elif key == "n_timesteps":
                checks.check_positive(key, as_number(value))
            elif key in SB3_VALUE_CHECKS and not own:
                SB3_VALUE_CHECKS[key](key, as_number(value))
            elif key in EVALUATED_KEYS and not isinstance(evaluated(value), dict | None):
                allowed = 'a dict, or a Python expression of one: "dict(a=1)"'
                raise checks.HyperparameterError(key, value, allowed)
    except checks.HyperparameterError as err:
        raise value_error(err, hyper) from err


def as_number(value: Any) -> Any:
    """Turn a numeric string (``"1e-3"``: PyYAML's float pitfall) into a float; leave the rest."""
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value)
    return value


def evaluated(value: Any) -> Any:
    """A string such as ``"dict(net_arch=[64])"`` evaluated with ``nn``/``th`` in scope; else the value."""
    return parse_value(value) if isinstance(value, str) else value


def import_object(path: str) -> Any:
    """Import ``"package.module.Name"`` (or ``"package.module:Name"``). A path into this package under its
    old import name (``agents.zoo.sb3_algos.MlpLstmPolicy``) is read as ``tpo_agents.…``."""
    module_name, _, name = path.replace(":", ".").rpartition(".")
    if not module_name:
        raise ConfigError(f"Expected a dotted path 'module.Name', got {path!r}")
    first, _, rest = module_name.partition(".")
    if first == "agents" and rest and importlib.util.find_spec(f"tpo_agents.{rest.partition('.')[0]}"):
        module_name = f"tpo_agents.{rest}"
    return getattr(importlib.import_module(module_name), name)


def instantiate(spec: Any) -> list[Any]:
    """Objects from a zoo spec: ``"mod.Cls"``, ``["mod.A", "mod.B"]`` or ``{"mod.Cls": {kwargs}}``."""
    if spec is None:
        return []
    if isinstance(spec, str):
        return [import_object(spec)()]
    if isinstance(spec, dict):
        return [import_object(path)(**(kwargs or {})) for path, kwargs in spec.items()]
    return [obj for item in spec for obj in instantiate(item)]


def wrapper_factory(spec: Any) -> Any:
    """A zoo ``env_wrapper``/``vec_env_wrapper`` spec as one callable ``env -> wrapped env`` (or None)."""
    if spec is None:
        return None
    items = spec if isinstance(spec, list) else [spec]
    wrappers = []
    for item in items:
        path, kwargs = next(iter(item.items())) if isinstance(item, dict) else (item, {})
        wrappers.append((import_object(path), kwargs or {}))

    def wrap(env: Any) -> Any:
        for cls, kwargs in wrappers:
            env = cls(env, **kwargs)
        return env

    return wrap


def linear_schedule(text: str) -> Any:
    """``"lin_3e-4"`` -> a picklable schedule from 3e-4 (start) to 0 (end of training)."""
    from stable_baselines3.common.utils import LinearSchedule

    return LinearSchedule(start=float(text.split("_", 1)[1]), end=0.0, end_fraction=1.0)


def with_schedules(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each ``lin_<v>`` string of :data:`SCHEDULE_KEYS` as its :func:`linear_schedule`."""
    return {key: linear_schedule(value) if key in SCHEDULE_KEYS and isinstance(value, str)
            and value.startswith("lin_") else value for key, value in kwargs.items()}


def algo_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """The constructor keyword arguments: the non-zoo keys, with schedules, ``policy_kwargs`` and the
    RL Zoo's other conversions (dotted ``policy`` paths imported, a ``train_freq`` list as a tuple)."""
    kwargs = with_schedules({key: as_number(value) for key, value in values.items() if key not in ZOO_KEYS})
    for key in EVALUATED_KEYS:
        if key in kwargs:
            kwargs[key] = evaluated(kwargs[key])
    for key in IMPORTED_KEYS:
        if isinstance(kwargs.get(key), str) and "." in kwargs[key]:
            kwargs[key] = import_object(kwargs[key])
    if isinstance(kwargs.get("train_freq"), list):
        kwargs["train_freq"] = tuple(kwargs["train_freq"])
    return kwargs


def sanitized(value: Any) -> Any:
    """A YAML-safe copy of ``value`` (tuples -> lists, other objects -> their repr)."""
    if isinstance(value, dict):
        return {str(k): sanitized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitized(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def write_yaml(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` with sorted keys as plain YAML (loadable with ``yaml.safe_load``)."""
    with open(path, "w") as f:
        yaml.safe_dump(sanitized(data), f, sort_keys=True, default_flow_style=False)
