"""SB3-style agents for TPO and its group-based peers (see ``agents.zoo.registry`` for the zoo names)."""

from agents.ce import CE
from agents.dg import DG
from agents.grpo import GRPO
from agents.pg import PG, GroupPG
from agents.ppo import PPO
from agents.tpo import TPO

__all__ = ["CE", "DG", "GRPO", "PG", "PPO", "TPO", "GroupPG"]
