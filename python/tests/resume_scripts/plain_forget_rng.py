"""Negative control for detcheck resume-check: the plain loop of
examples/python/resume_train.py, except that its resume does not restore torch's CPU RNG state (dropout draws from it) (see _plain.py)."""
from _plain import main

if __name__ == "__main__":
    main("forget_rng")
