"""``python -m tpo_agents.evaluate``: the task error of a trained agent (:mod:`tpo_agents.zoo.evaluate`)."""

from tpo_agents.zoo.evaluate import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
