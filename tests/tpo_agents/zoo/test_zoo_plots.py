"""Tests of ``python -m tpo_agents.zoo.plots`` (``tpo_agents.zoo.plots``, ``tpo_agents.zoo.results``) on run
folders written by tiny real ``train()`` runs and on small hand-written ones: the PNG, the score table against
hand-computed means, the axes (timesteps, episodes, updates; task error, reward, success), the eval
source, one horizon per env with unequal and disjoint runs flagged, resumed runs joined to their seed,
and the errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tpo_agents.zoo import plots, results
from tpo_agents.zoo.train import train

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]
BANDIT = "TPO-KArmedBandit-v0"
B = 4  # episodes per update of the grouped runs


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two TPO seeds and one GRPO seed on a 4-armed bandit (10 updates of B=4 episodes), two sb3_ppo
    seeds on CartPole-v1, one CE run (exact mode: no monitor rows) with evaluations."""
    folder = tmp_path_factory.mktemp("plots") / "logs"
    common = ["-f", str(folder), "--verbose", "0", "-tb", ""]
    bandit = ["--env", "KArmedBandit", "-n", str(10 * B), "--env-kwargs", "n_arms:4", "--eval-freq", "-1"]
    for algo, seed in (("tpo", 1), ("tpo", 2), ("grpo", 1)):
        train(["--algo", algo, *bandit, "--seed", str(seed), *common, "-params", f"batch_size:{B}"])
    for seed in (1, 2):
        train(["--algo", "sb3_ppo", "--env", "CartPole-v1", "-n", "200", "--seed", str(seed), *common,
               "--eval-freq", "64", "--eval-episodes", "2", "-params", "n_envs:2", "n_steps:16",
               "batch_size:32", "n_epochs:1"])  # fmt: skip
    train(["--algo", "ce", "--env", "MultiContextBandit", "-n", "20", "--seed", "1", *common, "--eval-freq",
           "10", "--eval-episodes", "3", "--env-kwargs", "n_contexts:5", "n_arms:3"])  # fmt: skip
    return folder


def monitor_rows(run: Path) -> list[dict[str, str]]:
    """The rows of a run's single monitor.csv, read with the csv module."""
    with open(run / "monitor.csv") as f:
        next(f)
        return list(csv.DictReader(f))


def se(values: list[float]) -> float:
    """The standard error of the seed mean: population std / sqrt(n), as the paper's figures."""
    return float(np.std(values) / np.sqrt(len(values)))


def run_plots(logs: Path, tmp_path: Path, *argv: str) -> dict:
    return plots.main(["-f", str(logs), "-o", str(tmp_path / "fig.png"), *argv])


def assert_png(path: Path) -> None:
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


# ------------------------------------------------------------------------------------ runs found
@pytest.mark.slow
def test_runs_are_found_with_their_env_ids(logs: Path) -> None:
    found = {(run.algo, run.env_id, run.number) for run in results.list_runs(str(logs))}
    bandit = "TPO/KArmedBandit-v0"
    assert found == {
        ("tpo", bandit, 1), ("tpo", bandit, 2), ("grpo", bandit, 1), ("sb3_ppo", "CartPole-v1", 1),
        ("sb3_ppo", "CartPole-v1", 2), ("ce", "TPO/MultiContextBandit-v0", 1),
    }  # fmt: skip
    out = plots.main(["-f", str(logs), "-a", "tpo"])  # default output: <log-folder>/plots/<y>-<x>.png
    assert_png(Path(out["figure"])) and Path(out["figure"]) == logs / "plots" / "task_error-timesteps.png"
    assert len(results.list_runs(str(logs))) == len(found)  # the plots folder is not taken for an algorithm
    short = results.find_runs(str(logs), ["TPO"], ["KArmedBandit"])  # case-insensitive algo, short env name
    assert {run.number for run in short} == {1, 2}


# ------------------------------------------------------------------------------------ the table
def test_task_error_table_equals_hand_computed_means(logs: Path, tmp_path: Path) -> None:
    out = run_plots(logs, tmp_path, "-a", "tpo", "-e", "KArmedBandit", "-w", "6", "--table",
                    str(tmp_path / "t.md"))  # fmt: skip
    assert_png(tmp_path / "fig.png")
    finals_error, finals_reward = [], []
    for seed in (1, 2):
        rows = monitor_rows(logs / "tpo" / f"{BANDIT}_{seed}")
        assert len(rows) == 10 * B
        finals_error.append(np.mean([1.0 - (row["is_success"] == "True") for row in rows[-6:]]))
        finals_reward.append(np.mean([float(row["r"]) for row in rows[-6:]]))
    (row,) = out["rows"]
    assert (row["algo"], row["env"], row["seeds"]) == ("tpo", "TPO/KArmedBandit-v0", 2)
    assert row["horizon"] == 10 * B
    assert row["task_error"] == pytest.approx((np.mean(finals_error), se(finals_error)))
    assert row["reward"] == pytest.approx((np.mean(finals_reward), se(finals_reward)))
    cell = f"{np.mean(finals_error):.4f} ± {se(finals_error):.4f}"
    assert f"| tpo | TPO/KArmedBandit-v0 | 2 | {10 * B} | {cell} |" in out["table"]
    assert "| seeds | horizon (timesteps) |" in out["table"] and out["notes"] == []  # equal lengths
    assert (tmp_path / "t.md").read_text().strip() == out["table"]


def test_updates_axis_averages_each_batch(logs: Path, tmp_path: Path) -> None:
    """Each update's point is the mean task error of its batch of B episodes (rows sharing one ``t``)."""
    run = next(r for r in results.list_runs(str(logs)) if r.algo == "grpo")
    x, y = results.series(run, "updates", "task_error")
    rows = monitor_rows(Path(run.path))
    errors = [1.0 - (row["is_success"] == "True") for row in rows]
    assert x.tolist() == list(range(1, 11))
    assert y == pytest.approx([np.mean(errors[k * B : (k + 1) * B]) for k in range(10)])
    out = run_plots(logs, tmp_path, "-a", "grpo", "-x", "updates")
    assert out["rows"][0]["task_error"][0] == pytest.approx(y[-1])  # window 1: the last update
    assert np.isnan(out["rows"][0]["task_error"][1])  # one seed: no standard error
    assert f"| grpo | TPO/KArmedBandit-v0 | 1 | 10 | {y[-1]:.4f} |" in out["table"]  # horizon: 10 updates


def test_reward_curves_over_seeds_several_algos_and_envs(logs: Path, tmp_path: Path) -> None:
    """One figure: a panel per env, an aggregated curve per algo; CartPole has no task error (n/a). The
    CartPole seeds finish different numbers of episodes: both are taken at the shorter one's end."""
    out = run_plots(logs, tmp_path, "-a", "tpo", "grpo", "sb3_ppo", "-y", "reward", "-x", "episodes",
                    "-w", "3")  # fmt: skip
    assert_png(tmp_path / "fig.png")
    by_algo = {row["algo"]: row for row in out["rows"]}
    assert set(by_algo) == {"tpo", "grpo", "sb3_ppo"} and by_algo["sb3_ppo"]["task_error"] is None
    rewards = [results.read_monitor(str(logs / "sb3_ppo" / f"CartPole-v1_{seed}"))["r"].to_numpy()
               for seed in (1, 2)]  # fmt: skip
    horizon = min(len(r) for r in rewards)
    finals = [float(r[horizon - 3 : horizon].mean()) for r in rewards]  # the mean of 3 episodes up to it
    assert by_algo["sb3_ppo"]["horizon"] == horizon and by_algo["tpo"]["horizon"] == 10 * B
    assert by_algo["sb3_ppo"]["reward"] == pytest.approx((np.mean(finals), se(finals)))
    unequal = [note for note in out["notes"] if note.startswith("Unequal lengths on CartPole-v1")]
    assert len(unequal) == (len({len(r) for r in rewards}) > 1) and len(out["notes"]) == len(unequal)
    assert "| sb3_ppo | CartPole-v1 | 2 |" in out["table"] and "| n/a |" in out["table"]


def test_mean_and_standard_error_band() -> None:
    curves = [results.Curve(np.array([0.0, 10.0]), np.array([1.0, 3.0])),
              results.Curve(np.array([0.0, 5.0, 10.0]), np.array([3.0, 3.0, 3.0]))]  # fmt: skip
    grid, mean, stderr = results.aggregate(curves, n_points=3)
    assert grid.tolist() == [0.0, 5.0, 10.0]
    assert mean.tolist() == [2.0, 2.5, 3.0]
    assert stderr == pytest.approx(np.array([1.0, 0.5, 0.0]) / np.sqrt(2))  # population std / sqrt(2)
    smoothed = results.smooth(np.arange(1.0, 6.0), np.array([1.0, 2.0, 3.0, 4.0, 5.0]), 2)
    assert smoothed.x.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]  # the first point: the mean of the points so far
    assert smoothed.y.tolist() == [1.0, 1.5, 2.5, 3.5, 4.5]


def test_eval_source_reads_evaluations(logs: Path, tmp_path: Path) -> None:
    """--source eval: exact mode (no monitor rows) still plots, from evaluations.npz."""
    out = run_plots(logs, tmp_path, "-a", "ce", "--source", "eval")
    assert_png(tmp_path / "fig.png")
    with np.load(logs / "ce" / "TPO-MultiContextBandit-v0_1" / "evaluations.npz") as data:
        error, reward = data["task_errors"][-1].mean(), data["results"][-1].mean()
        last = data["timesteps"][-1]
    assert out["rows"][0]["task_error"][0] == pytest.approx(error)
    assert out["rows"][0]["reward"][0] == pytest.approx(reward) and out["rows"][0]["horizon"] == last


def test_runs_without_the_data_are_left_out_with_a_note(
    logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = run_plots(logs, tmp_path)  # everything, task error over timesteps
    assert {row["algo"] for row in out["rows"]} == {"tpo", "grpo"}
    printed = capsys.readouterr().out
    assert "Left out" in printed and "CartPole-v1 defines no task error" in printed
    assert "no monitor.csv (exact mode" in printed


# ------------------------------------------------------------------------------------ horizon, resumes
ENV_ID = "TPO/KArmedBandit-v0"


def write_run(logs: Path, algo: str, number: int, errors: list[int], evals: dict[int, float] | None = None,
              recorded: dict | None = None, ours: bool = True) -> Path:
    """A hand-written run folder ``<logs>/<algo>/TPO-KArmedBandit-v0_<number>``: one monitor row per bandit
    episode (length 1, one update each) with these task errors, ``evaluations.npz`` at the given
    timesteps, and ``<Env>/args.yml`` (with ``command.txt`` for a run of this zoo, without for rl_zoo3's)."""
    run = logs / algo / f"{BANDIT}_{number}"
    (run / BANDIT).mkdir(parents=True)
    rows = [f"{1 - error},1,{t}.0,{error == 0}" for t, error in enumerate(errors)]
    header = [f'#{{"t_start": 0.0, "env_id": "{ENV_ID}"}}', "r,l,t,is_success"]
    (run / "monitor.csv").write_text("\n".join(header + rows) + "\n")
    if evals:
        np.savez(run / "evaluations.npz", timesteps=np.array(list(evals)),
                 results=np.array([[1 - e] for e in evals.values()]),
                 task_errors=np.array([[e] for e in evals.values()]))  # fmt: skip
    (run / BANDIT / "args.yml").write_text(yaml.safe_dump({"algo": algo, "env": ENV_ID, **(recorded or {})}))
    if ours:
        (run / BANDIT / "command.txt").write_text("train.py\n")
    return run


def test_unequal_lengths_are_compared_where_the_shortest_run_ends(tmp_path: Path) -> None:
    """GRPO (10 steps) against TPO seeds of 10 and 30 steps: the table is the figure's right end at 10, not
    each seed's own end (which would put TPO at 0.25, ahead of where the figure shows it), and one line
    says so."""
    logs = tmp_path / "logs"
    write_run(logs, "grpo", 1, [1, 1] + [0] * 8)
    write_run(logs, "tpo", 1, [1] * 6 + [0, 0, 1, 0])
    write_run(logs, "tpo", 2, [1] * 10 + [0] * 20)
    table = tmp_path / "t.md"
    out = plots.main(["-f", str(logs), "-o", str(tmp_path / "fig.png"), "-w", "2", "--table", str(table)])
    by_algo = {row["algo"]: row for row in out["rows"]}
    assert by_algo["grpo"]["horizon"] == by_algo["tpo"]["horizon"] == 10
    assert by_algo["tpo"]["task_error"] == pytest.approx((0.75, se([0.5, 1.0])))  # seeds at 0.5 and 1
    assert by_algo["grpo"]["task_error"][0] == 0
    assert out["notes"] == [f"Unequal lengths on {ENV_ID}: the runs end between 10 timesteps "
                            f"(grpo/{BANDIT}_1) and 30 (tpo/{BANDIT}_2); the figure and the table stop at 10"]
    assert out["table"].endswith(out["notes"][0]) and table.read_text().strip() == out["table"]
    args = plots.build_parser().parse_args(["-f", str(logs), "-w", "2"])
    groups = plots.load_curves(plots.group_runs(results.find_runs(str(logs))), args)
    plots.set_horizons(groups, "timesteps")
    x, mean, _ = results.aggregate(groups[1].curves, stop=groups[1].horizon)  # what the figure draws
    assert x[-1] == 10 and mean[-1] == pytest.approx(by_algo["tpo"]["task_error"][0])


def test_evaluations_that_do_not_overlap_are_flagged(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    logs = tmp_path / "logs"
    write_run(logs, "tpo", 1, [0] * 4, {10: 0.5, 20: 0.4})
    write_run(logs, "tpo", 2, [0] * 4, {30: 0.2, 40: 0.1})
    argv = ["-f", str(logs), "-o", str(tmp_path / "fig.png"), "--source", "eval"]
    with pytest.raises(results.ResultsError, match=rf"^tpo on {ENV_ID}: its seeds share no timesteps range "
                                                   rf"\(tpo/{BANDIT}_1 ends at 20, tpo/{BANDIT}_2 starts at "
                                                   r"30\), so they have no mean$"):  # fmt: skip
        plots.main(argv)
    write_run(logs, "grpo", 1, [0] * 4, {10: 0.9, 20: 0.8})
    write_run(logs, "ppo", 1, [0] * 4, {30: 0.3, 40: 0.2})
    out = plots.main(argv)
    assert f"Left out tpo on {ENV_ID}: its seeds share no timesteps range" in capsys.readouterr().out
    assert out["notes"] == [f"No shared range on {ENV_ID}: ppo starts at 30 timesteps, after grpo/{BANDIT}_1 "
                            "ends at 20; each algorithm is taken at its own end, not compared"]  # fmt: skip
    by_algo = {row["algo"]: row for row in out["rows"]}
    assert (by_algo["grpo"]["horizon"], by_algo["grpo"]["task_error"][0]) == (20, pytest.approx(0.8))
    assert (by_algo["ppo"]["horizon"], by_algo["ppo"]["task_error"][0]) == (40, pytest.approx(0.2))


def test_a_resumed_run_continues_its_seed_in_every_reader(tmp_path: Path) -> None:
    """Run 2 resumed run 1 at step 10 (``-i``): its monitor counts from 0, its evaluations (this zoo keeps
    the step counter) from 10; both continue run 1's curve, and the two are one seed."""
    logs = tmp_path / "logs"
    first = write_run(logs, "tpo", 1, [1] * 6 + [0] * 4, {5: 0.8, 10: 0.3})
    write_run(logs, "tpo", 2, [0] * 10, {15: 0.1, 20: 0.0}, {"resumed_from": str(first), "resumed_at": 10})
    write_run(logs, "tpo", 3, [1] * 10 + [0] * 10, {10: 0.9, 20: 0.0})
    seeds = results.find_runs(str(logs))
    assert [[run.number for run in seed.chain()] for seed in seeds] == [[1, 2], [3]]
    for x_axis in ("timesteps", "episodes", "updates"):
        x, y = results.series(seeds[0], x_axis, "task_error")
        assert x.tolist() == list(range(1, 21)) and y.tolist() == [1.0] * 6 + [0.0] * 14
    x, y = results.series(seeds[0], "timesteps", "task_error", "eval")
    assert x.tolist() == [5, 10, 15, 20] and y.tolist() == [0.8, 0.3, 0.1, 0.0]
    cut = results.series(seeds[0], "timesteps", "task_error", max_timesteps=12)[0]
    assert cut.tolist() == list(range(1, 13))
    for source in ("monitor", "eval"):
        out = plots.main(["-f", str(logs), "-o", str(tmp_path / "fig.png"), "--source", source, "-w", "1"])
        (row,) = out["rows"]
        assert (row["seeds"], row["horizon"], out["notes"]) == (2, 20, [])


def test_rl_zoo3_and_checkpoint_resumes_and_a_moved_log_folder(tmp_path: Path, capsys: pytest.CaptureFixture
                                                               ) -> None:  # fmt: skip
    """rl_zoo3 records only ``trained_agent`` (here a checkpoint at step 6 of a 10-step run) and restarts
    the step counter: the resumed run follows step 6, the source's later points are dropped. A recorded
    ``resumed_from`` that no longer exists (the log folder moved) is matched by its ``<algo>/<Env>_<N>``."""
    logs = tmp_path / "logs"
    source = write_run(logs, "ppo", 1, [1] * 10, {5: 0.9, 10: 0.7}, ours=False)
    with zipfile.ZipFile(source / "rl_model_6_steps.zip", "w") as archive:
        archive.writestr("data", json.dumps({"num_timesteps": 6}))
    checkpoint = {"trained_agent": str(source / "rl_model_6_steps.zip")}
    write_run(logs, "ppo", 2, [0] * 10, {5: 0.2, 10: 0.1}, checkpoint, ours=False)
    moved = {"resumed_from": f"/elsewhere/logs/tpo/{BANDIT}_1", "resumed_at": 10}
    write_run(logs, "tpo", 1, [1] * 10)
    write_run(logs, "tpo", 2, [0] * 5, recorded=moved)
    ppo, tpo = results.find_runs(str(logs))
    assert ppo.rl_zoo3 and (ppo.resumed_at, [run.number for run in ppo.chain()]) == (6, [1, 2])
    x, y = results.series(ppo, "timesteps", "task_error")
    assert x.tolist() == list(range(1, 17)) and y.tolist() == [1.0] * 6 + [0.0] * 10
    x, y = results.series(ppo, "timesteps", "task_error", "eval")
    assert x.tolist() == [5, 11, 16] and y.tolist() == [0.9, 0.2, 0.1]
    assert [run.number for run in tpo.chain()] == [1, 2]
    assert results.series(tpo, "episodes", "reward")[0][-1] == 15
    args_file = logs / "tpo" / f"{BANDIT}_2" / BANDIT / "args.yml"
    recorded = args_file.read_text()
    args_file.write_text(recorded.replace("resumed_at: 10", "resumed_at: '10'"))
    with pytest.raises(results.ResultsError, match=r"args.yml: resumed_at must be the step count the run "
                                                   r"resumed at, got '10'$"):  # fmt: skip
        results.find_runs(str(logs))
    args_file.write_text(recorded)
    (source / "rl_model_6_steps.zip").unlink()
    out = plots.main(["-f", str(logs), "-o", str(tmp_path / "fig.png"), "-w", "1"])
    assert [row["algo"] for row in out["rows"]] == ["tpo"]
    note = (f"Left out ppo on {ENV_ID} (1 run in {logs / 'ppo'}): resumed from {source} (args.yml's "
            "trained_agent), whose step count is not recorded and whose zip is not found")
    assert note in capsys.readouterr().out


def test_a_run_trained_with_trained_agent_records_where_it_resumed(tmp_path: Path) -> None:
    """``-i`` writes a new run folder whose args.yml names the source run and its step count; the plots
    join the two into one seed of 10 + 6 updates."""
    folder = tmp_path / "logs"
    bandit = ["--env", "KArmedBandit", "--env-kwargs", "n_arms:4", "--eval-freq", "-1", "--seed", "1", "-f",
              str(folder), "--verbose", "0", "-tb", "", "-params", f"batch_size:{B}"]  # fmt: skip
    first = train(["--algo", "tpo", "-n", str(10 * B), *bandit])
    second = train(["--algo", "tpo", "-n", str(6 * B), "-i", f"{first.save_path}/{BANDIT}.zip", *bandit])
    recorded = yaml.safe_load(Path(second.save_path, BANDIT, "args.yml").read_text())
    assert recorded["resumed_from"] == str(Path(first.save_path).resolve())
    assert recorded["resumed_at"] == 10 * B
    assert yaml.safe_load(Path(first.save_path, BANDIT, "args.yml").read_text())["resumed_from"] is None
    out = plots.main(["-f", str(folder), "-o", str(tmp_path / "fig.png"), "-x", "updates"])
    (row,) = out["rows"]
    assert (row["seeds"], row["horizon"]) == (1, 16)


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-a", "dqn"], r"no runs of dqn in .*logs/<algo>/<Env>_<N>; found: ce: TPO/MultiContextBandit-v0 "
                        r"\(1 run\); grpo: "),
        (["-a", "sb3_ppo", "-e", "TokenReversal"], r"no runs of TokenReversal in .*logs/\{sb3_ppo\}; found: "
                                                   r"sb3_ppo: CartPole-v1 \(2 runs\)"),
        (["-a", "sb3_ppo"], r"CartPole-v1 defines no task error \(monitor columns: .*; use -y reward"),
        (["-a", "sb3_ppo", "-x", "updates", "-y", "reward"], r"-x updates needs runs of the grouped"),
        (["-a", "ce", "-y", "reward"], r"no monitor.csv \(exact mode .*use --source eval"),
        (["-a", "ce", "--source", "eval", "-x", "episodes"], r"--source eval has only -x timesteps"),
        (["-a", "tpo", "-w", "0"], r"--window must be a positive"),
    ],
)  # fmt: skip
def test_one_line_errors(logs: Path, tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(results.ResultsError, match=message) as err:
        run_plots(logs, tmp_path, *argv)
    assert "\n" not in str(err.value)


def test_command_line_error_names_where_it_looked(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tpo_agents.zoo.plots", "-f", str(tmp_path / "nowhere")]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode != 0
    assert out.stderr.strip() == f"error: log folder '{tmp_path / 'nowhere'}' does not exist"
    (tmp_path / "empty").mkdir()
    with pytest.raises(results.ResultsError, match=r"no run folders \(<algo>/<Env>_<N>\) in .*empty"):
        results.find_runs(str(tmp_path / "empty"))
