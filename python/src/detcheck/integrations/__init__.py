"""Framework callbacks that record through :class:`detcheck.Recorder`; each
imports its framework only when used: ``detcheck.integrations.hf`` (a
transformers TrainerCallback) and ``detcheck.integrations.lightning`` (a
Lightning Callback). Both seal the checkpoints they see saved, from memory,
and check a resumed run against its checkpoint's seal (``seal=True``); with
``replica_guard=N`` both compare the data-parallel replicas every N optimizer
steps and after a resume (:class:`detcheck.ReplicaGuard`)."""
