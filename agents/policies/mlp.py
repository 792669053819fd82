"""MLP softmax policy (the MNIST contextual bandit, paper Sec. 3.3)."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_flattened_obs_dim, preprocess_obs
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import Tensor, nn

from .base import GroupPolicy, lecun_normal_

__all__ = ["MlpSoftmaxPolicy"]


class MlpSoftmaxPolicy(GroupPolicy):
    """``pi(. | obs) = softmax(MLP(obs))``: flat input -> Dense(h) -> act -> ... -> Dense(n_actions).

    Box observations are flattened to float; Discrete/MultiDiscrete ones are one-hot encoded (SB3's
    ``preprocess_obs``). Kernels are LeCun-normal (flax default, std ``1/sqrt(fan_in)``), biases zero.
    The default optimizer is ``torch.optim.Adam(lr, betas=(0.9, 0.999), eps=1e-8)``, which performs the
    same update as ``optax.adam``.

    :param observation_space: Box (e.g. ``Box(0, 1, (784,))``), Discrete or MultiDiscrete
    :param action_space: ``Discrete(n_actions)``
    :param lr_schedule: SB3 schedule (1e-3 in the paper)
    :param net_arch: hidden widths (default ``[50, 50]``)
    :param activation_fn: activation class (default ``nn.ReLU``)
    :param optimizer_class: optimizer class (default Adam)
    :param optimizer_kwargs: extra optimizer keyword arguments
    :param normalize_images: divide image observations by 255 (off by default)
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
        optimizer_class: type[torch.optim.Optimizer] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = False,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
        )
        self.net_arch = list(net_arch) if net_arch is not None else [50, 50]
        self.activation_fn = activation_fn
        self.input_dim = int(get_flattened_obs_dim(observation_space))
        if isinstance(observation_space, spaces.Discrete):
            self.input_dim = int(observation_space.n)
        layers: list[nn.Module] = []
        width = self.input_dim
        for hidden in self.net_arch:
            layers += [nn.Linear(width, hidden), activation_fn()]
            width = hidden
        layers.append(nn.Linear(width, self.n_actions))
        self.net = nn.Sequential(*layers)
        for module in self.net:
            if isinstance(module, nn.Linear):
                lecun_normal_(module.weight, module.in_features)
                nn.init.zeros_(module.bias)
        self._build_optimizer()

    def _default_optimizer(self, lr: float) -> torch.optim.Optimizer:
        kwargs = {"betas": (0.9, 0.999), "eps": 1e-8, **self.optimizer_kwargs}
        return torch.optim.Adam(self.parameters(), lr=lr, **kwargs)

    def logits(self, obs: PyTorchObs) -> Tensor:
        """Unnormalized scores, shape ``[N, n_actions]``."""
        assert isinstance(obs, Tensor)
        space = self.observation_space
        if isinstance(space, spaces.Discrete):
            x = torch.nn.functional.one_hot(obs.reshape(-1).long() - int(space.start), int(space.n)).float()
        elif isinstance(space, spaces.MultiDiscrete):
            start = torch.as_tensor(space.start, device=obs.device)
            x = preprocess_obs(obs.reshape(-1, len(space.nvec)).long() - start, space)
        else:
            x = preprocess_obs(obs, space, normalize_images=self.normalize_images)
        x = x.reshape(x.shape[0], -1).to(self.device)
        return self.net(x)

    def action_log_probs(self, obs: PyTorchObs) -> Tensor:
        return torch.log_softmax(self.logits(obs), dim=-1)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(net_arch=self.net_arch, activation_fn=self.activation_fn)
        return data
