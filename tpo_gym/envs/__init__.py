"""Gymnasium environments of ``tpo_gym``; each module holds one task family.

``bandits``: K-armed and multi-context bandits; ``tokens``: the token tasks; ``mnist``: the
MNIST contextual bandit; ``text``: text RLVR on reasoning-gym tasks (needs reasoning-gym, imported
when a text env is built); ``multiturn``: multi-turn text tasks (a number-guessing game, a calculator
tool task), whose calculator is ``arithmetic``. Import a module for its classes; ``import tpo_gym``
registers the ids.
"""
