"""The shared vocabulary of every layer: errors, decoding settings, limits, prompts, and the one
owner of every figure (measure: alpha, c, speedup) and of the theory's formulas."""
