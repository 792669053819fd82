"""MLP softmax policy (the MNIST contextual bandit, paper Sec. 3.3)."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_flattened_obs_dim, preprocess_obs
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import Tensor, nn

from tpo_agents.layout import ACTION_MAJOR_MAX_ACTIONS, as_action_major, log_softmax_last

from .base import GroupPolicy, lecun_normal_

__all__ = ["MlpSoftmaxPolicy"]


class MlpSoftmaxPolicy(GroupPolicy):
    """``pi(. | obs) = softmax(MLP(obs))``: flat input -> Dense(h) -> act -> ... -> Dense(n_actions).

    Box observations are flattened to float; Discrete/MultiDiscrete ones are one-hot encoded (SB3's
    ``preprocess_obs``). Kernels are LeCun-normal (flax default, std ``1/sqrt(fan_in)``), biases zero.
    The default optimizer is ``torch.optim.Adam(lr, betas=(0.9, 0.999), eps=1e-8, fused=True)``, which
    performs the same update as ``optax.adam`` (the fused kernel: one pass over each parameter, 5x faster
    than the per-tensor loop on a 20-member population).

    :param observation_space: Box (e.g. ``Box(0, 1, (784,))``), Discrete or MultiDiscrete
    :param action_space: ``Discrete(n_actions)``
    :param lr_schedule: SB3 schedule (1e-3 in the paper)
    :param net_arch: hidden widths (default ``[50, 50]``)
    :param activation_fn: activation class (default ``nn.ReLU``)
    :param optimizer_class: optimizer class (default Adam)
    :param optimizer_kwargs: extra optimizer keyword arguments
    :param normalize_images: divide image observations by 255 (off by default)
    :param n_seeds: S independent networks, each layer's weights stacked ``[S, out, in]`` (each
        member's ``nn.Linear`` weight) and biases ``[S, out, 1]``, applied with batched matrix products
        to feature-major activations ``[S, features, n]`` (see :meth:`_member_net`, :class:`GroupPolicy`)
    """

    supports_members = True
    members_amortize = True

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
        n_seeds: int = 1,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
            n_seeds=n_seeds,
        )
        self.net_arch = list(net_arch) if net_arch is not None else [50, 50]
        self.activation_fn = activation_fn
        self.input_dim = int(get_flattened_obs_dim(observation_space))
        if isinstance(observation_space, spaces.Discrete):
            self.input_dim = int(observation_space.n)
        widths = [self.input_dim, *self.net_arch, self.n_actions]
        if n_seeds == 1:
            layers: list[nn.Module] = []
            for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
                layers += [nn.Linear(fan_in, fan_out), activation_fn()]
            self.net = nn.Sequential(*layers[:-1])
            for module in self.net:
                if isinstance(module, nn.Linear):
                    lecun_normal_(module.weight, module.in_features)
                    nn.init.zeros_(module.bias)
        else:  # [S, out, in] kernels and [S, out, 1] biases, filled by load_members
            pairs = list(zip(widths[:-1], widths[1:], strict=True))
            self.kernels = nn.ParameterList([nn.Parameter(torch.zeros(n_seeds, o, i)) for i, o in pairs])
            self.biases = nn.ParameterList([nn.Parameter(torch.zeros(n_seeds, o, 1)) for _, o in pairs])
            self.activation = activation_fn()
        self._build_optimizer()

    def _default_optimizer(self, lr: float) -> torch.optim.Optimizer:
        kwargs = {"betas": (0.9, 0.999), "eps": 1e-8, "fused": True, **self.optimizer_kwargs}
        return torch.optim.Adam(self.parameters(), lr=lr, **kwargs)

    def _load_member(self, member: int, policy: GroupPolicy) -> None:
        linears = [module for module in policy.net if isinstance(module, nn.Linear)]
        for kernel, bias, linear in zip(self.kernels, self.biases, linears, strict=True):
            kernel[member].copy_(linear.weight)
            bias[member, :, 0].copy_(linear.bias)

    def _store_member(self, member: int, policy: GroupPolicy) -> None:
        linears = [module for module in policy.net if isinstance(module, nn.Linear)]
        for kernel, bias, linear in zip(self.kernels, self.biases, linears, strict=True):
            linear.weight.copy_(kernel[member])
            linear.bias.copy_(bias[member, :, 0])

    def _member_net(self, x: Tensor) -> Tensor:
        """The S networks on ``x`` ``[S, n, in]`` (or ``[n, in]``, shared by the members), feature-major:
        ``[S, out, n]``. Each layer is ``h <- act(W h + b)`` with the member's ``[out, in]`` kernel as
        the left operand of a batched product, so the short output axis (50 units, 10 actions) is never
        a product's last axis: on the CPU the 784 -> 50 layer's forward and weight gradient take ~10%
        less time than as ``x W``, the 50 -> 10 layer's ~3x less, and the logits come out action-major.
        A shared input is one product ``[S*out, in] @ [in, n]`` (the test-set evaluation)."""
        last = len(self.kernels) - 1
        h = x.mT  # [S, in, n] or [in, n]
        for i, (kernel, bias) in enumerate(zip(self.kernels, self.biases, strict=True)):
            if h.dim() == 3:
                h = torch.baddbmm(bias, kernel, h)
            else:
                h = (kernel.flatten(0, 1) @ h).unflatten(0, kernel.shape[:2]) + bias
            if i < last:
                h = self.activation(h)
        return h

    def logits(self, obs: PyTorchObs) -> Tensor:
        """Unnormalized scores ``[N, n_actions]``, laid out action-major
        (:func:`tpo_agents.layout.is_action_major`) where there are at most ``ACTION_MAJOR_MAX_ACTIONS``
        actions: torch's CPU softmax along a short last axis is slow
        (:func:`tpo_agents.layout.log_softmax_last`)."""
        x = self._features(obs)
        few = self.n_actions <= ACTION_MAJOR_MAX_ACTIONS
        if self.n_seeds == 1:
            scores = self.net(x)
            return as_action_major(scores) if few else scores
        scores = self._member_net(x.reshape(self.n_seeds, -1, x.shape[-1]))  # [S, A, n]
        if few:  # [A, S, n] in memory: rows member-major, the actions outermost
            return scores.transpose(0, 1).contiguous().reshape(self.n_actions, -1).T
        return scores.mT.reshape(len(x), self.n_actions)

    def member_log_probs(self, obs: PyTorchObs) -> Tensor:
        x = self._features(obs)
        if self.n_seeds == 1:
            return torch.log_softmax(self.net(x), dim=-1).unsqueeze(0)
        return torch.log_softmax(self._member_net(x), dim=1).mT  # over the actions of [S, A, n]

    def _features(self, obs: PyTorchObs) -> Tensor:
        """The flat float input ``[N, input_dim]`` of a batch of observations."""
        assert isinstance(obs, Tensor)
        space = self.observation_space
        if isinstance(space, spaces.Discrete):
            x = torch.nn.functional.one_hot(obs.reshape(-1).long() - int(space.start), int(space.n)).float()
        elif isinstance(space, spaces.MultiDiscrete):
            start = torch.as_tensor(space.start, device=obs.device)
            x = preprocess_obs(obs.reshape(-1, len(space.nvec)).long() - start, space)
        else:
            x = preprocess_obs(obs, space, normalize_images=self.normalize_images)
        return x.reshape(x.shape[0], -1).to(self.device)

    def action_log_probs(self, obs: PyTorchObs) -> Tensor:
        """``log_softmax`` of the logits ``[N, n_actions]``, in the logits' layout (:meth:`logits`)."""
        return log_softmax_last(self.logits(obs))

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(net_arch=self.net_arch, activation_fn=self.activation_fn)
        return data
