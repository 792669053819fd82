"""TPO inside other engines: ``trl`` (a ``GRPOTrainer`` subclass) and ``verl`` (a plugin).

Both import their maths from :mod:`agents.losses`; neither module is imported by ``agents``.
"""
