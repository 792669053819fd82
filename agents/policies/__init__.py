"""Categorical policies for grouped RL and their optimizers.

Every policy is a Stable-Baselines3 ``BasePolicy`` with ``action_log_probs(obs) -> [N, A]`` and an
``optimizer`` built from ``lr_schedule(1)``. SB3-style aliases: ``TabularPolicy``, ``MlpPolicy``,
``TransformerPolicy``.
"""

from .base import GroupPolicy, lecun_normal_, sample_categorical
from .mlp import MlpSoftmaxPolicy
from .optim import MuonAdam, NormalizedStep, newton_schulz, split_muon_adam
from .tabular import TabularSoftmaxPolicy
from .transformer import CausalTransformer, TransformerSoftmaxPolicy

TabularPolicy = TabularSoftmaxPolicy
MlpPolicy = MlpSoftmaxPolicy
TransformerPolicy = TransformerSoftmaxPolicy

__all__ = [
    "CausalTransformer",
    "GroupPolicy",
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
