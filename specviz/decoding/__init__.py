"""The exact algorithm: sampling rules, drafters, k policies, the speculative engine, token trees,
early-exit drafts, and loading a pair (target + drafter)."""
