"""Test configuration shared by every test module.

This file sits at the repository root so that ``pytest`` and ``python -m pytest`` both put the root on
``sys.path`` (the ``tests``, ``tpo_agents`` and ``experiments`` packages import from a plain checkout) and
so that the tiny language-model fixtures of :mod:`tests.llm_fixtures` serve every test module.
"""

pytest_plugins = ["tests.llm_fixtures"]  # tiny_llm_dir: a tiny random causal LM saved like a checkpoint
