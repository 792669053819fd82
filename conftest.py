"""Test configuration shared by every test module.

This file sits at the repository root so that ``pytest`` and ``python -m pytest`` both put the root on
``sys.path`` (the ``tests``, ``tpo_agents`` and ``experiments`` packages import from a plain checkout) and
so that the tiny language-model fixtures of :mod:`tests.llm_fixtures` serve every test module.

SB3 gives every ``learn()`` without a TensorBoard folder a logger folder of its own, an empty
``<tmp>/SB3-<date>`` (``stable_baselines3.common.logger.configure``), unless ``SB3_LOGDIR`` names one:
the tests name one per session, so a run of the suite leaves no folders in the system's temp directory.
"""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.llm_fixtures"]  # tiny_llm_dir: a tiny random causal LM saved like a checkpoint


@pytest.fixture(autouse=True, scope="session")
def _sb3_log_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3_logs")))
