"""``python -m tpo_agents.enjoy``: watch a trained agent, episode by episode (:mod:`tpo_agents.zoo.enjoy`)."""

from tpo_agents.zoo.enjoy import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
