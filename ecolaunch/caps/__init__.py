"""Power caps, one owner: what a job's cap may be (the admin's bounds and the power budget: :mod:`.limits`), the
closed loop's decisions (:mod:`.control`), the job's caps from placement to release (:mod:`.job`), the pass that
writes them and its ledger of originals (:mod:`.keeper`, :mod:`.ledger`), the privileged cap agent (:mod:`.agent`)
and the guard that restores them when a launcher dies (:mod:`.guard`). Below the policies, so that the launcher and
the simulator both call it. How a cap goes from a decision to the GPU: docs/architecture.md, "A watt change"."""
