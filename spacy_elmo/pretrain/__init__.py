"""Pretraining a biLM on raw text: data, vocabulary, language-model objective, training loop."""
