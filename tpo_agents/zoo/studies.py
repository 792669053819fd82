"""Optuna studies on disk: open a ``--storage``, name a study, read one trial's hyperparameters back.

Used by the search (:mod:`tpo_agents.zoo.optimize`) and by ``train.py --trial-id N``, which trains once
with the hyperparameters trial N of a study drew (rl_zoo3's ``--trial-id``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpo_agents.zoo import hyperparams as hp


def default_study_name(algo: str, env_name: str) -> str:
    """A study's name when ``--study-name`` is not given: ``<algo>_<Env>``."""
    return f"{algo}_{env_name}"


def open_storage(url: str | None) -> Any:
    """``None`` (in memory), an ``RDBStorage`` for a ``scheme://`` URL, else a journal file's storage.

    A journal file's folder is created; a URL or file that cannot be opened is a :class:`ConfigError`.
    """
    if not url:
        return None
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if "://" in url:
        try:
            return optuna.storages.RDBStorage(url)
        except Exception as err:  # SQLAlchemy, driver and URL errors alike
            raise hp.ConfigError(f"Cannot open --storage {url!r}: {hp.one_line(err)}") from err
    path = Path(url)
    if path.is_dir():
        raise hp.ConfigError(
            f"--storage {url!r} is a directory: give a journal file (e.g. {path / 'study.log'}) "
            "or a database URL (sqlite:///study.db)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    except OSError as err:
        raise hp.ConfigError(f"Cannot open --storage {url!r} as a journal file: {hp.one_line(err)}") from err


def trial_values(storage: str | None, study_name: str, trial_id: int, algo: str,
                 env_id: str) -> dict[str, Any]:
    """The hyperparameters trial ``trial_id`` of study ``study_name`` in ``storage`` drew (what the
    search recorded as the trial's ``hyperparams``). The study must exist, be of ``algo`` on
    ``env_id`` and hold that trial; otherwise a one-line :class:`ConfigError`."""
    import optuna

    if not storage:
        raise hp.ConfigError(f"--trial-id {trial_id} needs the --storage of the study that holds the trial")
    if not (storage.partition("://")[1] or Path(storage).is_file()):
        raise hp.ConfigError(f"--trial-id {trial_id}: no study storage at --storage {storage!r}")
    try:
        study = optuna.load_study(study_name=study_name, storage=open_storage(storage))
    except KeyError as err:
        raise hp.ConfigError(f"--trial-id {trial_id}: no study {study_name!r} in {storage} "
                             f"(pass its --study-name)") from err
    made = {key: study.user_attrs.get(key) for key in ("algo", "env_id")}
    if made != {"algo": algo, "env_id": env_id}:
        raise hp.ConfigError(f"--trial-id {trial_id}: study {study_name!r} searched {made['algo']} on "
                             f"{made['env_id']}, not {algo} on {env_id}")
    trials = {trial.number: trial for trial in study.get_trials(deepcopy=False)}
    if trial_id not in trials:
        known = f"0..{max(trials)}" if trials else "none yet"
        raise hp.ConfigError(f"--trial-id {trial_id}: study {study_name!r} has no such trial "
                             f"(trials: {known})")
    values = trials[trial_id].user_attrs.get("hyperparams")
    if values is None:
        raise hp.ConfigError(f"--trial-id {trial_id}: the trial recorded no hyperparameters")
    return dict(values)
