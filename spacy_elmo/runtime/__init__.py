"""The biLM runtime: one loaded biLM with its settings, shared by every entry point."""
from .runtime import ElmoRuntime, MixWeights, load_encoder
from .settings import BiLmSettings

__all__ = ["BiLmSettings", "ElmoRuntime", "MixWeights", "load_encoder"]
