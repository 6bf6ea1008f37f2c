"""The job model: what ecolaunch knows about a job (its profile and curve) and about a GPU model, and the one codec
that reads and writes them."""
