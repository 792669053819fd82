"""Reproduce the paper's experiments with the zoo's agents (``agents/``) and envs (``tpo_gym``).

``python -m experiments.run <experiment>`` runs the seeds (per-seed curves in ``results/``);
``python -m experiments.report <experiment>`` draws the figures and prints the paper's table beside
ours. The experiments are listed in ``experiments.definitions``; docs/results.md has the numbers.
"""
