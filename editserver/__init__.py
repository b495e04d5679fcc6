"""editserver: the local HTTP API, the CLI, benchmarks and the git-history replay harness."""

__version__ = "0.1.0"
