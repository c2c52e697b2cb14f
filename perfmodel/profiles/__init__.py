"""Hardware profiles — the fitted, calibrated or prior coefficients a `CostModel` is made of — and
how they are fitted and validated.

`profile` (HardwareProfile: YAML schema, loading, priors from datasheets), `fit` (measured
profiles from benchmark datasets), `calibrate` (GPU profiles calibrated on published runs),
`overlap` (the FSDP-side parameters fitted on measured FSDP2 steps), `fsdp_compare` (measured
FSDP2 steps beside the simulator), `memory_validation` (the memory model against PyTorch's
tracker), `cache` (slow cross-validations cached under the hashes of what produced them).
"""
