"""Placement policies behind one interface (:mod:`.base`): the baselines and, later, the GNN."""
