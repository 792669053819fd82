"""Categorical policies for grouped RL and their optimizers.

Every policy is a Stable-Baselines3 ``BasePolicy`` with an ``optimizer`` built from ``lr_schedule(1)``.
The categorical ones have ``action_log_probs(obs) -> [N, A]``; SB3-style aliases: ``TabularPolicy``,
``MlpPolicy``, ``TransformerPolicy``. ``LLMPolicy`` is a language model over text (needs the ``llm``
extra when built; importing it does not). :mod:`.decoding` gives any of them its log-probabilities along a
batch's sequences (SB3's ``evaluate_actions``), each distinct prefix or sequence computed once.
"""

from .base import GroupPolicy, lecun_normal_, sample_categorical
from .llm import Completions, LLMPolicy
from .mlp import MlpSoftmaxPolicy
from .optim import MuonAdam, NormalizedStep, newton_schulz, split_muon_adam
from .tabular import TabularSoftmaxPolicy
from .transformer import CausalTransformer, TransformerSoftmaxPolicy

TabularPolicy = TabularSoftmaxPolicy
MlpPolicy = MlpSoftmaxPolicy
TransformerPolicy = TransformerSoftmaxPolicy

__all__ = [
    "CausalTransformer",
    "Completions",
    "GroupPolicy",
    "LLMPolicy",
    "MlpPolicy",
    "MlpSoftmaxPolicy",
    "MuonAdam",
    "NormalizedStep",
    "TabularPolicy",
    "TabularSoftmaxPolicy",
    "TransformerPolicy",
    "TransformerSoftmaxPolicy",
    "lecun_normal_",
    "newton_schulz",
    "sample_categorical",
    "split_muon_adam",
]
