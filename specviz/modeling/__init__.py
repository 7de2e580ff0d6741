"""Models and weights: models.yaml, the on-disk cache, quantization, fast linears, the frequent-token
head, tiny random models, and a causal LM behind a KV cache."""
