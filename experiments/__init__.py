"""Reproduce the paper's experiments with the zoo's agents (``tpo_agents/``) and envs (``tpo_gym``).

``python -m experiments.run <experiment>`` runs the seeds, on this machine or a Ray cluster
(``--launcher ray``), into the committed per-seed files ``results/paper/``;
``python -m experiments.report <experiment>`` draws the figures and prints the paper's table beside
ours from those files. The experiments are listed in ``experiments.definitions``; docs/results.md has
the numbers.
"""
