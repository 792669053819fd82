"""Gymnasium environments of ``tpo_gym``; each module holds one task family.

``bandits``: K-armed and multi-context bandits; ``tokens``: the token tasks; ``mnist``: the
MNIST contextual bandit. Import a module for its classes; ``import tpo_gym`` registers the ids.
"""
