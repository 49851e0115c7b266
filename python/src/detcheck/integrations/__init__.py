"""Framework callbacks that record through :class:`detcheck.Recorder`; each
imports its framework only when used: ``detcheck.integrations.hf`` (a
transformers TrainerCallback) and ``detcheck.integrations.lightning`` (a
Lightning Callback)."""
