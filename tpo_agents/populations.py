"""Seeds as a batch dimension: the policy of S independent learners, member m built as the run with
seed ``seed + m`` would build its policy."""

from __future__ import annotations

from typing import Any

import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.utils import set_random_seed


def make_population(policy_class: type[BasePolicy], n_seeds: int, seed: int, device: th.device,
                    spaces_and_schedule: tuple[Any, Any, Any], policy_kwargs: dict[str, Any]) -> BasePolicy:
    """A policy of ``n_seeds`` members: member m is built exactly as the policy of a run with seed
    ``seed + m`` (torch's generator seeded with it, then the constructor) and samples from a generator
    in the state that run's global generator has after that construction (on an accelerator: that
    device's generator seeded with ``seed + m``). Leaves the global generators seeded with ``seed``.

    :param spaces_and_schedule: the policy constructor's ``(observation_space, action_space,
        lr_schedule)``
    :raises ValueError: ``policy_class`` has no populations (``supports_members``)
    """
    if not getattr(policy_class, "supports_members", False):
        raise ValueError(f"n_seeds={n_seeds}: {policy_class.__name__} has no populations; "
                         "use n_seeds=1 (populations: TabularPolicy, MlpPolicy, TransformerPolicy)")
    members, generators = [], []
    for member in range(n_seeds):
        set_random_seed(seed + member)
        policy = policy_class(*spaces_and_schedule, **policy_kwargs)
        generator = th.Generator(device=device)
        if generator.device.type == "cpu":
            generator.set_state(th.get_rng_state())
        else:  # a run on an accelerator samples from that device's generator, untouched by the init
            generator.manual_seed(seed + member)
        members.append(policy)
        generators.append(generator)
    population = policy_class(*spaces_and_schedule, n_seeds=n_seeds, **policy_kwargs).to(device)
    population.load_members([policy.to(device) for policy in members], generators)
    set_random_seed(seed)
    return population
