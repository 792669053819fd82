"""``python -m agents.evaluate``: the task error of a trained agent (see :mod:`agents.zoo.evaluate`)."""

from agents.zoo.evaluate import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
