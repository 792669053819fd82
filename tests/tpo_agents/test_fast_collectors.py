"""The fast collectors (tpo_agents.fast_collectors) equal the generic collector: same batches, same losses,
same parameters, for every algorithm and population size they serve; diagnostics only where logged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, ProgressBarCallback
from stable_baselines3.common.logger import KVWriter, Logger

import tpo_agents.fast_collectors as fast_module
import tpo_gym  # noqa: F401
from tpo_agents.fast_collectors import TableExactCollector, pixel_bytes
from tpo_agents.learn_loop import wants_rollout_metrics, wants_train_diagnostics
from tpo_agents.zoo.registry import make_agent

th.set_num_threads(1)

EXACT_ALGOS = ("tpo", "grpo", "dg", "pg", "ce", "tpo_no_anchor", "grpo_masked")
BANDIT = {"n_contexts": 6, "n_arms": 4}


class Rows(KVWriter):
    """Every logger dump."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.rows.append({k: float(v) for k, v in key_values.items()
                          if isinstance(v, int | float) and not k.startswith("time/")})  # not wall times


def exact_model(algo: str, n_seeds: int, fast: bool, **kwargs: Any) -> Any:
    model = make_agent(algo, "TabularPolicy", "TPO/MultiContextBandit-v0", env_kwargs=BANDIT,
                       group_mode="exact", learning_rate=0.1, n_epochs=1, seed=3, n_seeds=n_seeds,
                       policy_kwargs={"init": "normal"}, **kwargs)  # fmt: skip
    model.fast_collection = fast
    return model


@pytest.mark.parametrize("n_seeds", [1, 3])
@pytest.mark.parametrize("algo", EXACT_ALGOS)
def test_fast_exact_updates_equal_the_generic_path(algo: str, n_seeds: int) -> None:
    runs = []
    for fast in (True, False):
        model = exact_model(algo, n_seeds, fast)
        assert model.collector().fast is fast
        writer = Rows()
        model.set_logger(Logger(folder=None, output_formats=[writer]))
        model.learn(n_iterations=4, log_interval=1)
        members = {key: values.tolist() for key, values in model.member_rollout.items()}
        runs.append((model.policy.logits.detach().clone(), writer.rows, members, model.num_timesteps))
    (fast, *fast_logs), (generic, *generic_logs) = runs
    assert th.equal(fast, generic)
    assert fast_logs == generic_logs  # every logged value (diagnostics included), member values, steps


def test_the_fast_batch_is_the_generic_batch() -> None:
    model = exact_model("tpo", 3, True)
    model.learn(n_iterations=2)  # the collector has scored the env; the table has moved
    collector = TableExactCollector(model.vector_env, model.policy, model.mode)
    first = collector(lambda interactions: True)
    again = collector(lambda interactions: True)  # from the table alone
    generic = model.collect(model._init_callback(None))
    for batch in (first, again):
        for field in ("obs", "rewards", "old_log_probs"):
            assert th.equal(getattr(batch, field), getattr(generic, field)), field
        # its one forward, with gradient, is the update's first: pi_old is that forward detached
        assert batch.first_forward.requires_grad
        assert th.equal(batch.first_forward.detach(), batch.old_log_probs)


class NeedsDiagnostics(BaseCallback):
    wants_train_diagnostics = True

    def _on_step(self) -> bool:
        return True


def test_diagnostics_only_for_logged_updates_or_when_asked() -> None:
    assert not wants_train_diagnostics(CallbackList([ProgressBarCallback()]))
    assert wants_train_diagnostics(CallbackList([CallbackList([NeedsDiagnostics()])]))
    for callback, expected in ((None, 2), (NeedsDiagnostics(), 6)):
        model = exact_model("tpo", 2, True)
        computed = []
        train = model.train

        def counting(batch: Any, diagnostics: bool = True, train: Any = train, seen: list = computed) -> None:
            seen.append(diagnostics)
            train(batch, diagnostics)

        model.train = counting
        writer = Rows()
        model.set_logger(Logger(folder=None, output_formats=[writer]))
        model.learn(n_iterations=6, log_interval=3, callback=callback)
        assert sum(computed) == expected and computed[2] and computed[5], callback
        assert len(writer.rows) == 2 and all("train/q_mass_winners" in row for row in writer.rows)


class NeedsRollout(BaseCallback):
    wants_rollout_metrics = True

    def _on_step(self) -> bool:
        return True


def test_rollout_values_only_for_logged_updates_or_when_asked() -> None:
    assert not wants_rollout_metrics(CallbackList([ProgressBarCallback(), NeedsDiagnostics()]))
    assert wants_rollout_metrics(CallbackList([CallbackList([NeedsRollout()])]))
    for callback, fast, expected in ((None, True, 2), (NeedsRollout(), True, 6), (None, False, 6)):
        model = exact_model("tpo", 2, fast)
        computed = []
        log_rollout = model.mode.log_rollout

        def counting(logger: Any, batch: Any, inner: Any = log_rollout, seen: list = computed) -> Any:
            seen.append(True)
            return inner(logger, batch)

        model.mode.log_rollout = counting
        writer = Rows()
        model.set_logger(Logger(folder=None, output_formats=[writer]))
        model.learn(n_iterations=6, log_interval=3, callback=callback)
        assert len(computed) == expected, (callback, fast)
        assert len(writer.rows) == 2 and all("rollout/task_error" in row for row in writer.rows)
        assert set(model.member_rollout) == {"task_error"}  # the last update is logged
    model = exact_model("tpo", 2, True)
    model.learn(n_iterations=2, log_interval=0)  # no update logged: none computed
    assert model.member_rollout == {}
    model.collect(model._init_callback(None))  # the generic path afterwards records its batch's values
    assert set(model.member_rollout) == {"task_error"}


@pytest.mark.parametrize("algo", ["tpo", "grpo"])
def test_the_generic_path_computes_diagnostics_for_logged_updates_and_they_move_nothing(algo: str) -> None:
    """The transformer's generic collector: ``train/`` diagnostics only for logged updates or where a
    callback asks, as with a fast collector; the weights after 3 updates are the same bit for bit whether
    or not they were computed."""
    runs = []
    for callback, log_interval, expected in ((None, 0, [False] * 3), (None, 2, [False, True, False]),
                                             (NeedsDiagnostics(), 0, [True] * 3)):
        model = make_agent(algo, "TransformerPolicy", "TPO/TokenReversal-v0",
                           env_kwargs={"sequence_length": 3, "vocab_size": 2, "reward": "terminal"},
                           group_mode="sequence", group_size=4, batch_size=4, n_epochs=2, seed=0,
                           policy_kwargs={"d_model": 16, "n_layers": 1})
        assert not model.collector().fast
        computed = []
        train = model.train
        model.train = lambda batch, diagnostics=True, train=train, seen=computed: (
            seen.append(diagnostics), train(batch, diagnostics))
        model.set_logger(Logger(folder=None, output_formats=[Rows()]))
        model.learn(n_iterations=3, log_interval=log_interval, callback=callback)
        assert computed == expected
        runs.append([p.detach().clone() for p in model.policy.parameters()])
    for weights in runs[1:]:
        assert all(th.equal(a, b) for a, b in zip(runs[0], weights, strict=True))


def test_a_stopping_callback_stops_the_fast_loop() -> None:
    class StopAtOnce(BaseCallback):
        def _on_step(self) -> bool:
            return False

    model = exact_model("pg", 2, True)
    before = model.policy.logits.detach().clone()
    model.learn(n_iterations=5, callback=StopAtOnce())
    assert th.equal(model.policy.logits.detach(), before)
    assert model.num_timesteps == BANDIT["n_contexts"]


SINGLE_RUNS = {
    "tpo": {"baseline": 0.5}, "grpo": {}, "dg": {"baseline": 0.5}, "pg": {"baseline": "batch_mean"},
    "group_pg": {}, "tpo/interactions": {"match": "interactions", "group_size": 4},
    "tpo/2 epochs": {"baseline": 0.5, "n_epochs": 2}, "ppo/2 epochs": {"n_epochs": 2},
    "dg/expected": {"baseline": "expected"}, "tpo/expected": {"baseline": "expected"},
}


def single_model(name: str, n_seeds: int, fast: bool, folder: Any = None) -> Any:
    settings = {"n_epochs": 1, **SINGLE_RUNS[name]}
    model = make_agent(name.split("/")[0], "TabularPolicy", "TPO/KArmedBandit-v0", env_kwargs={"n_arms": 7},
                       group_mode="single", batch_size=6, learning_rate=0.1, seed=5,
                       n_seeds=n_seeds, monitor_dir=folder, **settings)  # fmt: skip
    model.fast_collection = fast
    return model


@pytest.mark.parametrize("n_seeds", [1, 3])
@pytest.mark.parametrize("name", sorted(SINGLE_RUNS))
def test_fast_single_context_updates_equal_the_generic_path(name: str, n_seeds: int, tmp_path: Any) -> None:
    runs = []
    for fast in (True, False):
        folder = tmp_path / str(fast)
        folder.mkdir()
        th.manual_seed(0)
        model = single_model(name, n_seeds, fast, str(folder))
        assert model.collector().fast is fast
        writer = Rows()
        model.set_logger(Logger(folder=None, output_formats=[writer]))
        model.learn(n_iterations=5, log_interval=1)
        members = {key: values.tolist() for key, values in model.member_rollout.items()}
        monitor = [line.split(",")[:2] for line in (folder / "monitor.csv").read_text().splitlines()[2:]]
        runs.append((model.policy.logits.detach().clone(), writer.rows, members, model.num_timesteps,
                     model._episode_num, monitor))  # fmt: skip
    (fast, *fast_logs), (generic, *generic_logs) = runs
    assert th.equal(fast, generic)
    assert fast_logs == generic_logs


def test_the_fast_collectors_leave_other_policies_and_contexts_to_the_generic_path() -> None:
    several = make_agent("tpo", "TabularPolicy", "TPO/MultiContextBandit-v0",
                         env_kwargs={"n_contexts": 3, "n_arms": 4}, group_mode="single", batch_size=6)
    assert not several.collector().fast  # contexts drawn from the env's streams: the generic path
    assert np.isfinite(several.learn(n_iterations=2).policy.logits.detach().numpy()).all()


MNIST_RUNS = {
    "tpo": {"baseline": "expected"}, "grpo": {"n_epochs": 2}, "dg": {"baseline": "expected"},
    "pg": {"baseline": "expected"}, "group_pg": {"baseline": "expected"}, "ppo": {"n_epochs": 2},
    "ce": {"group_mode": "exact"}, "tpo_interactions": {"match": "interactions", "group_size": 3},
}


@pytest.mark.parametrize("n_seeds", [1, 2])
@pytest.mark.parametrize("name", sorted(MNIST_RUNS))
def test_fast_mnist_updates_equal_the_generic_path(name: str, n_seeds: int) -> None:
    algo = name.split("_")[0] if name.endswith("interactions") else name
    settings = {"group_mode": "single", "n_epochs": 1, **MNIST_RUNS[name]}
    runs = []
    for fast in (True, False):
        th.manual_seed(0)
        model = make_agent(algo, "MlpPolicy", "TPO/MNISTBandit-v0", batch_size=8, learning_rate=1e-3,
                           seed=7, n_seeds=n_seeds, **settings)  # fmt: skip
        model.fast_collection = fast
        assert model.collector().fast is fast
        writer = Rows()
        model.set_logger(Logger(folder=None, output_formats=[writer]))
        model.learn(n_iterations=3, log_interval=1)
        members = {key: values.tolist() for key, values in model.member_rollout.items()}
        params = th.cat([p.detach().flatten() for p in model.policy.parameters()])
        runs.append((params, writer.rows, members, model.num_timesteps))
    (fast, *fast_logs), (generic, *generic_logs) = runs
    assert th.equal(fast, generic)
    assert fast_logs == generic_logs


def test_pixel_bytes_give_the_images_back_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_module, "PIXEL_CHUNK_ROWS", 5)  # 64 rows: 13 chunks
    raw = np.arange(256, dtype=np.uint8).repeat(3).reshape(-1, 12)  # every byte value
    images = th.from_numpy(np.divide(raw, np.float32(255.0), dtype=np.float32))  # as load_mnist reads them
    found = pixel_bytes(images)
    assert found is not None and found.dtype == th.uint8 and th.equal(found, th.from_numpy(raw))
    assert th.equal(found.float().div_(255.0), images)
    assert pixel_bytes(images) is found  # once per data set
    noisy = images.clone()
    noisy[50, 3] = th.nextafter(noisy[50, 3], th.tensor(2.0))  # one value off bytes / 255 by one ulp
    assert pixel_bytes(noisy) is None
    assert pixel_bytes(images * 2) is None  # beyond 255 / 255
    assert pixel_bytes(th.full((2, 3), float("nan"))) is None
