"""The lab admin's side: the policy file (:mod:`.rules`, :mod:`.schema`, :mod:`.lint`) and which policy binds a
process (:mod:`.binding`), who is trusted (:mod:`.safety`, :mod:`.interpreter`), the host's metrics (:mod:`.metrics`).
The caps the policy allows are applied by :mod:`ecolaunch.caps`."""
