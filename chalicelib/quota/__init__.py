"""The pure quota core: the decision, the policy and its limits; no I/O."""
