"""The paper's hyperparameters as RL Zoo YAML files (``<algo>.yml``, one entry per env id).

A package only so that ``pip install .`` ships the files beside ``agents``; ``train.py`` reads them from
``zoo_configs/`` in the working directory, or from here (``tpo_agents.zoo.hyperparams.PROJECT_CONFIGS``).
"""
