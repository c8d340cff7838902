"""Small models for examples, tests and benchmarks."""

from haiscale.models.gpt import GPT, GPTConfig

__all__ = ["GPT", "GPTConfig"]
