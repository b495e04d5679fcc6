"""Benchmarks behind ``editserver bench <name>``: one module each, exposing ``register(subparsers)``.

Figures are reported as measured in one run, side by side (ratios), never asserted in tests.
"""
