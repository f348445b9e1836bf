"""The biLM runtime: one loaded biLM with its settings, shared by every entry point."""
from .runtime import ElmoRuntime, MixWeights
from .settings import BiLmSettings

__all__ = ["BiLmSettings", "ElmoRuntime", "MixWeights"]
