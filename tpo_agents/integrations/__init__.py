"""TPO inside other engines: ``trl`` (a ``GRPOTrainer`` subclass) and ``verl`` (a plugin).

Both import their maths from :mod:`tpo_agents.losses`; neither module is imported by ``agents``.
"""
