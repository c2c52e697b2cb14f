"""What is trained, on what, and how: the specifications every other layer reads.

`arch` (ModelSpec: shapes, parameter counts, FLOPs per token; dense, windowed, MLA and
mixture-of-experts layouts), `hf_config` (Hugging Face config.json -> ModelSpec, one explicit
layout per model_type),
`hardware` (GPUs, links, islands, clusters), `recipe` (TrainingRecipe: how an island trains),
`catalog` and `energy_catalog` (the shipped catalogs, validated), `formulas` (one home for each
formula the planner shares: dtype sizes, ring collectives, the DiLoCo sync), `errors` (typed
errors with "To fix:" hints), `paths` (where the shipped data lives). Nothing here simulates or
fits; it imports nothing above it.
"""
