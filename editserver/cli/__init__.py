"""Subcommands of the editserver CLI, one module each."""
