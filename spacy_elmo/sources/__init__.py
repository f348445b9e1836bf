"""Where models come from: the catalogue of published models, downloads and the cache, the embedded models."""
