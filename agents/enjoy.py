"""``python -m agents.enjoy``: watch a trained agent, episode by episode (see :mod:`agents.zoo.enjoy`)."""

from agents.zoo.enjoy import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
