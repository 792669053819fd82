"""Tests of the zoo's Optuna search (``train.py -optimize``, :mod:`tpo_agents.zoo.optimize`): a 3-trial TPO
search on a tiny TokenReversal, its report (best.yml loads back and trains), pruning, samplers, shared
journal/SQLite storage, and a one-line error for each bad flag."""

from __future__ import annotations

import csv
from pathlib import Path

import optuna
import pytest
import torch
import yaml

from tpo_agents.zoo import registry
from tpo_agents.zoo.hyperparams import ConfigError, constructor_keys, evaluated
from tpo_agents.zoo.optimize import SEARCH_EVAL_EPISODES, Objective, check_options, make_pruner, make_sampler
from tpo_agents.zoo.run import EVAL_EPISODES
from tpo_agents.zoo.samplers import SAMPLERS, SamplerContext
from tpo_agents.zoo.train import configure, main, train

pytestmark = pytest.mark.slow  # the whole module (see pyproject: markers)

torch.set_num_threads(1)

ENV_ID = "TPO/TokenReversal-v0"
#: TokenReversal with H = 3, B = 4 prompts, K = 2 candidates: 12 env steps per update.
TINY = ["-params", "batch_size:4", "group_size:2", "--env-kwargs", "sequence_length:3"]


def search(tmp_path: Path, *argv: str, algo: str = "tpo", env: str = "TokenReversal", n: int = 48):
    """A quiet ``-optimize`` run into ``tmp_path/logs``: 2 evaluations of 8 episodes per trial."""
    base = ["--algo", algo, "--env", env, "-f", str(tmp_path / "logs"), "--seed", "0", "--verbose", "0"]
    base += ["-optimize", "-n", str(n), "--n-evaluations", "2", "--eval-episodes", "8", "--n-eval-envs", "8"]
    return train([*base, *argv])


def csv_rows(folder: str) -> list[dict[str, str]]:
    with open(Path(folder) / "trials.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def tpo_search(tmp_path_factory: pytest.TempPathFactory):
    """The issue's test: 3 trials of TPO (TPE, median pruner) with B and K held by -params."""
    tmp_path = tmp_path_factory.mktemp("search")
    return tmp_path, search(tmp_path, "--n-trials", "3", *TINY)


# ------------------------------------------------------------------------------ search and report
@pytest.mark.slow
def test_three_trial_search_writes_the_report(tpo_search) -> None:
    tmp_path, result = tpo_search
    folder = Path(result.report_path)
    assert folder.parent == tmp_path / "logs" / "tpo"
    assert folder.name.startswith("report_TPO-TokenReversal-v0_3-trials-48-tpe-median_")
    for name in ("optimization_history.png", "param_importances.png"):
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    trials = result.study.trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3
    assert result.metric == "task_error" and result.direction == "minimize"
    assert result.study.direction == optuna.study.StudyDirection.MINIMIZE
    for t in trials:
        # B and K were given as overrides: held fixed; eta, the rate and the epochs are searched
        assert set(t.params) == {"eta", "learning_rate", "n_epochs"}
        assert 1e-4 <= t.params["learning_rate"] <= 1e-2 and 1 <= t.params["n_epochs"] <= 8
        assert 0.0 <= t.value <= 1.0 and t.value == t.user_attrs["task_error"]
        assert sorted(t.intermediate_values) == [1, 2]  # 2 evaluations, the last one is the value
        assert t.intermediate_values[2] == t.value and t.user_attrs["num_timesteps"] == 48
    assert result.best_value == min(t.value for t in trials)
    rows = csv_rows(result.report_path)
    assert [int(r["number"]) for r in rows] == [0, 1, 2] and {r["state"] for r in rows} == {"COMPLETE"}
    assert float(rows[result.best_trial]["value"]) == pytest.approx(result.best_value)


def test_best_yaml_is_a_zoo_entry_that_trains(tpo_search) -> None:
    tmp_path, result = tpo_search
    best_yml = Path(result.report_path) / "best.yml"
    data = yaml.safe_load(best_yml.read_text())
    assert list(data) == [ENV_ID]
    entry = data[ENV_ID]
    best = result.study.best_trial
    assert {k: entry[k] for k in best.params} == best.params == result.best_hyperparams
    assert entry["batch_size"] == 4 and entry["group_size"] == 2 and entry["n_timesteps"] == 48
    assert entry["env_kwargs"]["sequence_length"] == 3 and entry["policy"] == "TransformerPolicy"
    run = train(
        ["--algo", "tpo", "--env", "TokenReversal", "--hyperparams", str(best_yml), "-n", "24", "--seed", "1",
         "-f", str(tmp_path / "logs"), "--eval-freq", "-1", "-tb", "", "--verbose", "0"]
    )  # fmt: skip
    model = run.model
    assert model.eta == pytest.approx(entry["eta"]) and model.n_epochs == entry["n_epochs"]
    assert model.learning_rate == pytest.approx(entry["learning_rate"])
    assert model.batch_size == 4 and model.env_kwargs["sequence_length"] == 3 and model.num_timesteps >= 24


# ---------------------------------------------------------------------------------------- pruning
class AlwaysPrune(optuna.pruners.BasePruner):
    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return True


def test_a_pruned_trial_stops_training(tmp_path: Path) -> None:
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "--seed", "0", "--verbose", "0"]
    argv += ["-optimize", "-n", "120", "--n-evaluations", "4", "--eval-episodes", "4", *TINY]
    setup = configure(argv)
    options = check_options(setup)
    study = optuna.create_study(pruner=AlwaysPrune(), direction=options.direction)
    study.optimize(Objective(setup, options), n_trials=1)
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert list(trial.intermediate_values) == [1]  # pruned at the first evaluation (30 steps in)
    assert 30 <= trial.user_attrs["num_timesteps"] < 120
    assert not tmp_path.joinpath("tpo").exists()  # trials write no files


def test_pruner_settings(tmp_path: Path) -> None:
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "--verbose", "0", "-optimize"]
    setup = configure([*argv, "--n-evaluations", "9", "--n-startup-trials", "3", *TINY])
    options = check_options(setup)
    median = make_pruner(options)
    assert isinstance(median, optuna.pruners.MedianPruner)
    assert median._n_startup_trials == 3 and median._n_warmup_steps == 3  # the RL Zoo's n_evaluations // 3
    options.pruner = "none"
    assert isinstance(make_pruner(options), optuna.pruners.NopPruner)
    options.pruner = "halving"
    assert isinstance(make_pruner(options), optuna.pruners.SuccessiveHalvingPruner)
    for name, cls in (("tpe", "TPESampler"), ("random", "RandomSampler"), ("cmaes", "CmaEsSampler")):
        options.sampler = name
        assert type(make_sampler(options, 0)).__name__ == cls


def test_no_pruner_with_cmaes_completes_every_trial(tmp_path: Path) -> None:
    flags = ["--sampler", "cmaes", "--pruner", "none", "--n-startup-trials", "1", "--no-optim-plots"]
    result = search(tmp_path, "--n-trials", "2", *flags, *TINY)
    assert [t.state.name for t in result.study.trials] == ["COMPLETE", "COMPLETE"]
    assert "cmaes-none" in result.report_path
    assert sorted(p.name for p in Path(result.report_path).iterdir()) == ["best.yml", "trials.csv"]


# ---------------------------------------------------------------------------------------- storage
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_shared_storage_accumulates_trials(tmp_path: Path, kind: str) -> None:
    """Two runs (as two processes or machines would) add their trials to one study."""
    path = tmp_path / "db" / ("study.log" if kind == "journal" else "study.db")
    if kind == "sqlite":
        path.parent.mkdir()
    storage = str(path) if kind == "journal" else f"sqlite:///{path}"
    shared = ["--storage", storage, "--study-name", "shared", "--sampler", "random", "--no-optim-plots"]
    first = search(tmp_path, "--n-trials", "1", *shared, *TINY)
    assert len(first.study.trials) == 1 and len(csv_rows(first.report_path)) == 1
    second = search(tmp_path, "--n-trials", "2", "--seed", "7", *shared, *TINY)  # the later --seed wins
    assert len(second.study.trials) == 3
    assert first.report_path != second.report_path and len(csv_rows(second.report_path)) == 3
    assert [t.user_attrs["seed"] for t in second.study.trials] == [0, 7, 7]
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend

        loaded = optuna.load_study(
            study_name="shared", storage=optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        )
    else:
        loaded = optuna.load_study(study_name="shared", storage=storage)
    assert len(loaded.trials) == 3 and loaded.user_attrs["algo"] == "tpo"
    assert loaded.user_attrs["metric"] == "task_error" and loaded.user_attrs["n_timesteps"] == 48


def test_joining_a_study_made_for_other_settings_is_refused(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.log")
    search(tmp_path, "--n-trials", "1", "--storage", storage, "--no-optim-plots", *TINY)
    reports = list((tmp_path / "logs" / "tpo").iterdir())
    with pytest.raises(ConfigError, match=r"n_timesteps=48 \(here 60\).*--study-name") as err:
        search(tmp_path, "--n-trials", "1", "--storage", storage, *TINY, n=60)
    assert "\n" not in str(err.value)
    assert list((tmp_path / "logs" / "tpo").iterdir()) == reports


# ------------------------------------------------------------------------------------- bad flags
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--sampler", "tp"], "Unknown sampler 'tp'. Did you mean 'tpe'? Choose one of: tpe, random, cmaes"),
        (["--pruner", "medain"], "Unknown pruner 'medain'. Did you mean 'median'?"),
        (["--optimize-metric", "loss"], "Unknown --optimize-metric 'loss'"),
        (["--n-trials", "0"], "--n-trials must be at least 1, got 0"),
        (["--n-evaluations", "0"], "--n-evaluations must be at least 1, got 0"),
        (["--max-total-trials", "0"], "--max-total-trials must be at least 1, got 0"),
        (["--n-jobs", "0"], "--n-jobs must be a positive number of threads or -1"),
        (
            ["--storage", "sqlite:////nonexistent-dir/sub/study.db"],
            "Cannot open --storage 'sqlite:////nonexist",
        ),
        (["--storage", "nosuchdb://host/study"], "Cannot open --storage 'nosuchdb://host/study'"),
        (["--storage", "{tmp}"], "is a directory: give a journal file"),
        (["-i", "{tmp}/model.zip"], "--trained-agent cannot be combined with -optimize"),
    ],
)
def test_bad_flags_are_one_line_errors_before_any_file(tmp_path: Path, flags: list[str], message: str):
    flags = [flag.replace("{tmp}", str(tmp_path)) for flag in flags]
    with pytest.raises(ConfigError) as err:
        search(tmp_path, "--n-trials", "1", *flags, *TINY)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "logs").exists()


def test_main_prints_error_line(tmp_path: Path) -> None:
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path / "logs"), "--verbose", "0"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "-optimize", "--sampler", "grid"])
    assert exit_info.value.code == "error: Unknown sampler 'grid'. Choose one of: tpe, random, cmaes"
    assert not (tmp_path / "logs").exists()


# --------------------------------------------------------------------------------------- samplers
def draw(algo: str, base: dict, fixed: frozenset[str] = frozenset(), mode: str | None = "token", n: int = 8):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    context = SamplerContext(algo=algo, base=base, fixed=fixed, group_mode=mode, n_envs=base.get("n_envs", 1))
    return [SAMPLERS[algo](study.ask(), context) for _ in range(n)]


@pytest.mark.parametrize(
    "algo, keys",
    [
        ("tpo", {"eta", "learning_rate", "n_epochs", "group_size", "batch_size"}),
        ("tpo_1ep", {"eta", "learning_rate", "group_size", "batch_size"}),
        ("grpo", {"clip_range", "beta", "learning_rate", "n_epochs"}),
        ("grpo_no_kl", {"clip_range", "learning_rate", "n_epochs"}),
        ("dg", {"eta", "learning_rate"}),
        ("ppo", {"clip_range", "learning_rate", "n_epochs"}),
    ],
)
def test_grouped_samplers_draw_their_keys_in_range(algo: str, keys: set[str]) -> None:
    base = {"learning_rate": 1e-3, "batch_size": 100, "group_size": 8}
    fixed = frozenset(registry.ablation_kwargs(algo))
    for params in draw(algo, base, fixed):
        assert set(params) == keys
        assert 1e-4 <= params["learning_rate"] <= 1e-2
        assert 0.1 <= params.get("eta", 1.0) <= 10 and 1 <= params.get("n_epochs", 1) <= 8
        assert 25 <= params.get("batch_size", 25) <= 400 and 2 <= params.get("group_size", 2) <= 32
        assert 0.05 <= params.get("clip_range", 0.1) <= 0.4 and 1e-3 <= params.get("beta", 0.1) <= 1.0
    # the rate's range follows the entry (tabular bandits: 0.1); single mode has no K; held keys stay
    for params in draw("tpo", {"learning_rate": 0.1, "batch_size": 100}, frozenset({"eta"}), mode="single"):
        assert set(params) == {"learning_rate", "n_epochs", "batch_size"}
        assert 0.01 <= params["learning_rate"] <= 1


@pytest.mark.parametrize("algo", ["sb3_ppo", "a2c", "dqn", "qrdqn", "trpo", "ars", "ppo_lstm"])
def test_sb3_samplers_give_constructor_keys(algo: str) -> None:
    accepted = constructor_keys(registry.get_algo(algo))
    base = {"n_envs": 8, "policy_kwargs": "dict(net_arch=[50, 50])"}
    for params in draw(algo, base, mode=None):
        assert params and (accepted is None or set(params) <= accepted), set(params) - (accepted or set())
        if "policy_kwargs" in params:
            kwargs = evaluated(params["policy_kwargs"])
            assert isinstance(kwargs, dict) and "net_arch" in kwargs and kwargs["net_arch"] != [50, 50]
        if "n_steps" in params and "batch_size" in params:
            assert params["batch_size"] <= params["n_steps"] * 8
        yaml.safe_load(yaml.safe_dump(params))  # YAML-ready values
    fixed = frozenset({"batch_size", "policy_kwargs"})
    pinned = draw(algo, {**base, "batch_size": 64}, fixed=fixed, mode=None)
    assert all("batch_size" not in p and "policy_kwargs" not in p for p in pinned)


def test_sb3_ppo_search_logs_one_line_per_trial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SB3's PPO through the zoo's env pipeline; trials are quiet: one line each, no training table."""
    argv = ["--algo", "sb3_ppo", "--env", "TokenReversal", "-f", str(tmp_path / "logs"), "--seed", "0"]
    argv += ["-optimize", "-n", "64", "--n-trials", "2", "--n-evaluations", "2", "--eval-episodes", "4"]
    argv += ["--no-progress", "--no-optim-plots", "-params", "n_envs:2", "n_steps:8", "batch_size:16"]
    argv += ["n_epochs:1", "--env-kwargs", "sequence_length:3"]
    result = train(argv)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("Trial ")]
    assert len(lines) == 2 and lines[0].startswith("Trial   0 complete  task_error=")
    assert "learning_rate=" in lines[0] and "ent_coef=" in lines[0] and "| best: trial" in lines[1]
    assert "rollout/" not in out and "Eval num_timesteps" not in out
    assert f"Report: {result.report_path}" in out
    entry = yaml.safe_load((Path(result.report_path) / "best.yml").read_text())[ENV_ID]
    assert entry["n_steps"] == 8 and entry["n_envs"] == 2 and "gamma" in entry and "policy_kwargs" in entry


def test_reward_is_maximised_on_other_envs(tmp_path: Path) -> None:
    """DQN on CartPole (no task error): the objective is the mean evaluation reward."""
    result = search(tmp_path, "--n-trials", "2", "--no-optim-plots", "-params", "learning_starts:50",
                    "buffer_size:1000", "train_freq:4", algo="dqn", env="CartPole-v1", n=300)  # fmt: skip
    assert result.metric == "reward" and result.direction == "maximize"
    for trial in result.study.trials:
        assert trial.value == trial.user_attrs["mean_reward"] and "task_error" not in trial.user_attrs
        assert "train_freq" not in trial.params and "gradient_steps" in trial.user_attrs["hyperparams"]


def test_ctrl_c_still_writes_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = Objective.__call__

    def interrupted_at_second_trial(self: Objective, trial: optuna.Trial) -> float:
        if trial.number == 1:
            raise KeyboardInterrupt
        return original(self, trial)

    monkeypatch.setattr(Objective, "__call__", interrupted_at_second_trial)
    result = search(tmp_path, "--n-trials", "5", "--no-optim-plots", *TINY)
    assert result.interrupted and [t.state.name for t in result.study.trials] == ["COMPLETE", "FAIL"]
    assert len(csv_rows(result.report_path)) == 2 and result.best_trial == 0
    assert (Path(result.report_path) / "best.yml").is_file()


def test_ctrl_c_inside_a_trial_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """Ctrl-C while a trial trains: no Optuna traceback, one line naming the stopped trial, the report."""
    tiny = [*TINY[:3], "callback:tests.tpo_agents.zoo.test_zoo.InterruptAfter", *TINY[3:]]
    result = search(tmp_path, "--n-trials", "3", "--no-optim-plots", *tiny)
    out, err = capfd.readouterr()
    assert result.interrupted and [t.state.name for t in result.study.trials] == ["FAIL"]
    assert "Interrupted (trial 0 stopped, recorded as failed): writing the report of the trials so far" in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "failed" not in err
    assert csv_rows(result.report_path)[0]["error"] == "interrupted (Ctrl-C)"


def test_a_search_evaluates_more_episodes_by_default(tmp_path: Path) -> None:
    """Five episodes rank trials on noise (docs/zoo.md): a search evaluates SEARCH_EVAL_EPISODES."""
    argv = ["--algo", "tpo", "--env", "TokenReversal", "-f", str(tmp_path), "--verbose", "0"]
    assert configure([*argv, "-optimize"]).args.eval_episodes == SEARCH_EVAL_EPISODES == 100
    assert configure(argv).args.eval_episodes == EVAL_EPISODES == 5
    assert configure([*argv, "-optimize", "--eval-episodes", "7"]).args.eval_episodes == 7


def test_parallel_jobs(tmp_path: Path) -> None:
    result = search(
        tmp_path, "--n-trials", "2", "--n-jobs", "2", "--sampler", "random", "--no-optim-plots", *TINY
    )
    assert sorted(t.state.name for t in result.study.trials) == ["COMPLETE", "COMPLETE"]


@pytest.mark.parametrize("algo", ["sb3_ppo", "a2c", "dqn", "qrdqn", "trpo", "ars", "ppo_lstm"])
def test_sb3_sampled_models_build(algo: str) -> None:
    """Every drawn setting builds the algorithm (on CartPole: one env, no training)."""
    from stable_baselines3.common.env_util import make_vec_env

    from tpo_agents.zoo.hyperparams import algo_kwargs

    env = make_vec_env("CartPole-v1", n_envs=1)
    extra = {"buffer_size": 1000} if algo in ("dqn", "qrdqn") else {}
    for params in draw(algo, {"n_envs": 1}, mode=None, n=3):
        policy = "MlpLstmPolicy" if algo == "ppo_lstm" else "MlpPolicy"
        model = registry.get_algo(algo)(policy, env, **algo_kwargs(params), **extra)
        assert model.learning_rate == pytest.approx(params["learning_rate"])
    env.close()
