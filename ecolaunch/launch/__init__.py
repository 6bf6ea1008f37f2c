"""torchrun compatibility: the parser (:mod:`.argv`), the worker launch (:mod:`.torchrun`), the queue and
booking around it (:mod:`.session`), worker environment (:mod:`.workerenv`) and exit codes (:mod:`.exitcodes`)."""
