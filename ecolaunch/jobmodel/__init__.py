"""The job model: what ecolaunch knows about a job (its profile: measured cap points, demand; its curve; the cap chosen
on it and the caps worth profiling) and about a GPU model (the static board description, the one cap clamp), and the
one codec that reads and writes them. Named
``jobmodel``, not ``job``: ``ecolaunch.job`` is the public ``@ecolaunch.job`` decorator."""
