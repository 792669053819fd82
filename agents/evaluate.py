"""``python -m agents.evaluate``: the task error of a trained agent (see :mod:`agents.zoo.evaluate`)."""

from agents.zoo.evaluate import main

if __name__ == "__main__":
    main()
