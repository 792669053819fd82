"""Benchmark scripts (not tests): they print figures."""
