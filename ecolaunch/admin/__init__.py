"""The lab admin's side: the policy file (:mod:`.rules`) and the privileged cap agent."""
