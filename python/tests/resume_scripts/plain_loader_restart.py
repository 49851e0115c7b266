"""Negative control for detcheck resume-check: the plain loop of
examples/python/resume_train.py, except that its resume restarts the resumed epoch's loader at its first batch (see _plain.py)."""
from _plain import main

if __name__ == "__main__":
    main("loader_restart")
