"""The docs' generated tables (``experiments.docs_tables``): docs/results.md's, docs/llm.md's and
docs/agents.md's equal to what the committed seed files give, README's layout to the modules' docstrings,
and the generator itself on small hand-made seed files and packages."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from experiments.core import RESULTS, save_seed, seed_path
from experiments.docs_tables import (
    AGENTS_DOC,
    BEGIN,
    DOC,
    END,
    LLM_DOC,
    README,
    SUPERSEDED,
    blocks,
    code_versions_table,
    cpu_seconds_table,
    differences,
    experiment_page,
    file_sizes_table,
    fill,
    generate,
    layout_table,
    main,
    pages_of,
    seed_files,
    seed_ranges,
    what_ran_table,
)
from experiments.pairwise import PAIRWISE_LEGEND
from experiments.report import report

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_pages_hold_the_generated_tables():
    """Regenerating every table from results/paper, results/superseded and the modules gives exactly what
    the pages hold (docs/llm.md the LLM experiments', docs/agents.md the agents', README.md the layout,
    docs/results.md every other), and each page holds every table of its own (``python -m
    experiments.docs_tables`` rewrites them)."""
    tables = generate(ROOT / RESULTS, ROOT / SUPERSEDED, code=ROOT)
    for doc in (DOC, LLM_DOC, AGENTS_DOC, README):
        text = (ROOT / doc).read_text()
        own = {name: body for name, body in tables.items() if doc in pages_of(name)}
        assert sorted(blocks(text)) == sorted(own), doc
        assert differences(text, own) == [], "run python -m experiments.docs_tables"


def test_readme_holds_the_layout_of_the_modules():
    """README's layout is the modules' own docstrings: a module added, deleted or redescribed changes it."""
    assert blocks((ROOT / README).read_text())["layout"] == layout_table(ROOT)
    assert pages_of("layout") == (README,) and pages_of("report:llm_study") == (LLM_DOC,)
    assert pages_of("superseded-report:terminal") == (DOC,)
    assert pages_of("findings:llm_study") == (LLM_DOC, README)
    assert pages_of("findings:agents_study") == (AGENTS_DOC, README)


def test_layout_table_lists_every_module_with_its_docstring(tmp_path):
    """A package's row, a row per module, a row per subpackage naming its modules; the first paragraph of
    each docstring on one line, its reST roles as code; a module without a docstring is an error."""
    for package in ("tpo_gym", "tpo_agents", "experiments", "benchmarks"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(f'"""The {package} package."""\n')
    (tmp_path / "tpo_agents" / "tpo.py").write_text('"""Target Policy\nOptimization.\n\nMore."""\n')
    modes = tmp_path / "tpo_agents" / "modes"
    modes.mkdir()
    (modes / "__init__.py").write_text('"""Modes of :mod:`tpo_agents.rollout`."""\n')
    (modes / "token.py").write_text('"""Token | mode."""\n')
    (tmp_path / "tpo_agents" / "zoo_configs").mkdir()  # a folder without __init__.py: not a package
    rows = layout_table(tmp_path).splitlines()[2:]
    assert rows == [
        "| `tpo_gym/` | The tpo_gym package. |",
        "| `tpo_agents/` | The tpo_agents package. |",
        "| `tpo_agents/modes/` | Modes of `tpo_agents.rollout`. Modules: `token.py`. |",
        "| `tpo_agents/tpo.py` | Target Policy Optimization. |",
        "| `experiments/` | The experiments package. |",
        "| `benchmarks/` | The benchmarks package. |",
    ]
    (tmp_path / "benchmarks" / "speed.py").write_text("import os\n")
    with pytest.raises(ValueError, match="speed.py: no docstring"):
        layout_table(tmp_path)


def test_llm_and_agents_experiments_tables_go_on_their_own_pages():
    assert pages_of("report:llm_study") == pages_of("pairwise:llm_cpu") == pages_of("held-out:llm_study") \
        == (LLM_DOC,)
    assert pages_of("report:agents_grid") == pages_of("lr-grid:agents_grid") == (AGENTS_DOC,)
    assert experiment_page("agents_grid") == AGENTS_DOC and experiment_page("llm_grid") == LLM_DOC
    for name in ("report:terminal", "what-ran", "superseded-report:mnist", "pairwise-legend",
                 "findings:ablations"):
        assert pages_of(name) == (DOC,), name


# ------------------------------------------------------------------------------------------- hand-made
def _seed(root: Path, experiment: str, variant: str, algo: str, seed: int, curve: list[float],
          **meta) -> Path:
    """A seed file as ``experiments.run`` writes it (the meta keys the report and the tables read)."""
    path = seed_path(root, experiment, variant, algo, seed)
    kwargs = {"group_mode": "token"} if algo in ("tpo", "grpo") else {}
    spec = {"algo": algo, "kwargs": kwargs, "n_updates": len(curve)}
    save_seed(path, {"update/error": np.array(curve)},
              {"experiment": experiment, "variant": variant, "seed": seed, "fingerprint": f"{algo}-fp",
               "spec": spec, "wall_s": 1.0, **meta})
    return path


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """vocab_sweep V2: tpo seeds 0-4 at two commits (one file without ``code``, one without ``host``),
    ppo seeds 0-2 (on two CPUs); eta_sweep eta1: tpo seeds 0-1."""
    root = tmp_path / "results"
    for seed in range(5):
        meta = {"code": "aaaaaaa" if seed in (0, 1, 3) else "bbbbbbb", "host": "node1"}
        if seed == 4:
            meta.pop("code")
        if seed == 3:
            meta.pop("host")
        if seed < 2:
            meta["cpu_s"] = 10.0 + seed
        _seed(root, "vocab_sweep", "V2", "tpo", seed, [0.5, 0.2 - 0.01 * seed, 0.0], **meta)
    for seed in range(3):
        cpu = ("CPU X (AVX2)", 7.0) if seed < 2 else ("CPU Y (AVX512)", 3.0)
        _seed(root, "vocab_sweep", "V2", "ppo", seed, [0.5, 0.4, 0.3 - 0.1 * seed], code="ccccccc",
              host="node2", cpu=cpu[0], cpu_s=cpu[1])
    for seed in range(2):
        _seed(root, "eta_sweep", "eta1", "tpo", seed, [0.9, 0.1], code="ddddddd", host="node1")
    return root


def test_seed_ranges():
    assert seed_ranges([6, 0, 1, 2, 4, 7]) == "0–2, 4, 6–7"
    assert seed_ranges([3]) == "3"
    assert seed_ranges([]) == ""


def test_seed_files_read_the_meta_in_the_report_order(results):
    files = seed_files(results)
    assert [(f.experiment, f.algo, f.seed) for f in files] == (
        [("vocab_sweep", "ppo", s) for s in range(3)] + [("vocab_sweep", "tpo", s) for s in range(5)]
        + [("eta_sweep", "tpo", s) for s in range(2)])
    tpo = [f for f in files if f.algo == "tpo" and f.experiment == "vocab_sweep"]
    assert [f.code for f in tpo] == ["aaaaaaa", "aaaaaaa", "bbbbbbb", "aaaaaaa", None]
    assert [f.updates for f in tpo] == [3] * 5
    assert tpo[0].size == seed_path(results, "vocab_sweep", "V2", "tpo", 0).stat().st_size


def test_code_versions_table(results):
    lines = code_versions_table(seed_files(results)).splitlines()
    assert lines[0] == ("| experiment | variant | method | seeds | `code` of the seed files: seeds | `host` "
                        "| `cpu`: seeds |")
    assert lines[2:] == [
        "| `vocab_sweep` | V2 | ppo | 3 | `ccccccc`: 0–2 | `node2` | CPU X (AVX2): 0–1; CPU Y (AVX512): 2 |",
        "| `vocab_sweep` | V2 | tpo | 5 | `aaaaaaa`: 0–1, 3; `bbbbbbb`: 2; not recorded: 4 "
        "| `node1`, not recorded | not recorded: 0–4 |",
        "| `eta_sweep` | eta1 | tpo | 2 | `ddddddd`: 0–1 | `node1` | not recorded: 0–1 |",
    ]


def test_cpu_seconds_table_by_commit(results):
    lines = cpu_seconds_table(seed_files(results)).splitlines()
    assert lines[2:] == [
        "| `vocab_sweep` | V2 | ppo | `ccccccc` on CPU X (AVX2): 7 (2 seeds); `ccccccc` on CPU Y (AVX512): 3 "
        "(1 seed) | 0 |",
        "| `vocab_sweep` | V2 | tpo | `aaaaaaa`: 10 (10–11, 2 seeds) | 3 |",
    ]  # eta_sweep records no cpu_s: no row


def test_file_sizes_table(results):
    files = seed_files(results)
    sizes = [f.size for f in files]
    vocab = [f.size for f in files if f.experiment == "vocab_sweep"]
    lines = file_sizes_table(files).splitlines()
    assert lines[2].startswith(f"| `vocab_sweep` | 8 | {min(vocab) / 1000:.1f}–{max(vocab) / 1000:.1f} | ")
    assert lines[-1] == (f"| all | 10 | {min(sizes) / 1000:.1f}–{max(sizes) / 1000:.1f} | "
                         f"{sum(sizes) / 1000:,.1f} |")


def test_what_ran_table(results):
    table = what_ran_table(seed_files(results))
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines()}
    assert rows["vocab_sweep"].endswith("| 20 × 1,000 | 2 / 16 | 3 × 3: V2 (ppo); 5 × 3: V2 (tpo) |")
    assert rows["eta_sweep"].endswith("| 1 / 5 | 2 × 2: eta1 (tpo) |")
    assert rows["mnist"].endswith("| 0 / 6 | none |")


@pytest.mark.slow
def test_generated_report_tables_are_what_the_report_prints(results, tmp_path):
    tables = generate(results, None)
    assert set(tables) == {"what-ran", "code-versions", "cpu-seconds", "file-sizes", "pairwise-legend",
                           "report:vocab_sweep", "pairwise:vocab_sweep", "report:eta_sweep"}
    printed = report("vocab_sweep", results, tmp_path / "figures")
    assert tables["report:vocab_sweep"] in printed
    assert tables["pairwise:vocab_sweep"] + "\n\n" + PAIRWISE_LEGEND in printed
    assert "| V2 | tpo (token) | 5 | 3 |" in tables["report:vocab_sweep"]
    assert tables["report:eta_sweep"] in report("eta_sweep", results, tmp_path / "figures")


def test_superseded_cells_get_their_code_versions_and_report_tables(results, tmp_path):
    """Cells a later code replaced (``--superseded``) add their own code-versions and report tables, read
    from their files alone; without such files neither table exists."""
    old = tmp_path / "superseded"
    for seed in range(2):
        _seed(old, "vocab_sweep", "V2", "tpo", seed, [0.9, 0.8, 0.7], code="eeeeeee", host="node3")
    tables = generate(results, old, tracked_only=False)
    assert tables["superseded"] == code_versions_table(seed_files(old))
    assert "`eeeeeee`: 0–1" in tables["superseded"] and "eeeeeee" not in tables["code-versions"]
    assert "superseded-report:eta_sweep" not in tables
    report_table = tables["superseded-report:vocab_sweep"]
    assert "70.00%" in report_table and report_table != tables["report:vocab_sweep"]
    bare = generate(results, tmp_path / "none", tracked_only=False)
    assert not {name for name in bare if name.startswith("superseded")}


def test_fill_replaces_only_what_lies_between_the_markers():
    text = (f"intro\n\n{BEGIN.format('a')}\nold a\n{END}\n\nmiddle\n{BEGIN.format('b')}\n{END}\nend\n")
    assert blocks(text) == {"a": "old a", "b": ""}
    new = fill(text, {"a": "| new |", "b": "x\ny", "c": "unused"})
    assert new == (f"intro\n\n{BEGIN.format('a')}\n| new |\n{END}\n\n"
                   f"middle\n{BEGIN.format('b')}\nx\ny\n{END}\nend\n")
    assert blocks(new) == {"a": "| new |", "b": "x\ny"}
    assert fill(new, {"a": "| new |", "b": "x\ny"}) == new
    assert differences(text, {"a": "| new |", "b": ""}) == ["a"]
    with pytest.raises(KeyError, match="b"):
        fill(text, {"a": "x"})
    with pytest.raises(ValueError, match="twice"):
        blocks(text + f"{BEGIN.format('a')}\n{END}\n")


def test_main_checks_and_rewrites_the_page(results, tmp_path, capsys):
    doc = tmp_path / "results.md"
    names = list(generate(results, tmp_path / "none"))
    doc.write_text("# page\n\n" + "\n\n".join(f"{BEGIN.format(n)}\nstale\n{END}" for n in names) + "\n")
    args = ["--doc", str(doc), "--llm-doc", str(tmp_path / "llm.md"), "--agents-doc",
            str(tmp_path / "agents.md"), "--readme", str(tmp_path / "README.md"), "--root", str(ROOT),
            "--results", str(results), "--superseded", str(tmp_path / "none")]
    (tmp_path / "README.md").write_text(f"# readme\n\n{BEGIN.format('layout')}\n{END}\n")
    before = doc.read_text()
    assert main([*args, "--check"]) == 1
    assert doc.read_text() == before
    assert "table code-versions differs" in capsys.readouterr().out
    assert main(args) == 0
    assert main([*args, "--check"]) == 0
    assert blocks(doc.read_text())["code-versions"] == code_versions_table(seed_files(results))
    assert blocks((tmp_path / "README.md").read_text())["layout"] == layout_table(ROOT)
    doc.write_text(doc.read_text().replace(BEGIN.format("file-sizes"), "<!-- file-sizes -->"))
    assert main([*args, "--check"]) == 1  # a table the files give but the page lacks
    assert "no marked table file-sizes" in capsys.readouterr().out


def test_only_the_files_git_tracks_count(results):
    """A seed a run is still writing (untracked) changes no table; outside a git work tree every file
    counts."""
    assert len(seed_files(results, tracked_only=True)) == 10  # not in a git work tree
    subprocess.run(["git", "init", "-q", str(results)], check=True)
    subprocess.run(["git", "add", "vocab_sweep/V2/ppo"], cwd=results, check=True)
    tracked = seed_files(results, tracked_only=True)
    assert [(f.algo, f.seed) for f in tracked] == [("ppo", 0), ("ppo", 1), ("ppo", 2)]
    assert len(seed_files(results)) == 10
    tables = generate(results, None)
    assert set(tables) == {"what-ran", "code-versions", "cpu-seconds", "file-sizes", "pairwise-legend",
                           "report:vocab_sweep"}
    assert "| V2 | ppo | 3 | 3 |" in tables["report:vocab_sweep"]
    assert "tpo" not in tables["report:vocab_sweep"]
    assert "| V2 | tpo (token) | 5 | 3 |" in generate(results, None, tracked_only=False)["report:vocab_sweep"]


def test_an_experiment_in_outcomes_and_findings_gets_both_blocks_from_one_reading(tmp_path):
    """terminal (in ``OUTCOMES`` and ``FINDINGS``) gets its seeds' outcomes and its differences in words
    beside its report and pairwise tables; vocab_sweep (in neither) gets neither."""
    root = tmp_path / "results"
    for seed in range(2):
        _seed(root, "terminal", "prompts/H7", "tpo", seed, [0.9, 0.01, 0.0 + 0.3 * seed])
        _seed(root, "terminal", "prompts/H7", "grpo", seed, [0.9, 0.9, 1.0])
    _seed(root, "vocab_sweep", "V2", "tpo", 0, [0.5, 0.0])
    tables = generate(root, None, tracked_only=False)
    terminal = {name for name in tables if name.endswith(":terminal")}
    assert terminal == {"report:terminal", "pairwise:terminal", "findings:terminal", "outcomes:terminal"}
    assert not {"outcomes:vocab_sweep", "findings:vocab_sweep"} & set(tables)
    counts, differences_, legend = tables["outcomes:terminal"].split("\n\n")
    assert counts.splitlines()[2:] == ["| prompts/H7 | tpo (token) | 2 | 1 | 2 | 1 | 1 | 0 | 1 | — |",
                                       "| prompts/H7 | grpo (token) | 2 | 0 | 0 | 0 | 0 | 2 | — | 90.0% |"]
    row = differences_.splitlines()[2]
    assert row.startswith("| prompts/H7 | tpo (token) − grpo (token) | 2 / 2 | 1 vs 0: ")
    assert legend.startswith("a vs b: TPO's seeds and the method's")
    assert "no result yet (2 and 2 of 20 seeds committed)" in tables["findings:terminal"]
