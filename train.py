"""Train an agent on a ``TPO/`` env from YAML hyperparameters (RL-Zoo style); see ``tpo_agents/zoo/``.

Example: ``python train.py --algo tpo --env TokenReversal --hyperparams zoo_configs/``
"""

from tpo_agents.zoo import main

if __name__ == "__main__":
    main()
