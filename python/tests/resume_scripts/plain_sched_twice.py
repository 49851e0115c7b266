"""Negative control for detcheck resume-check: the plain loop of
examples/python/resume_train.py, except that its resume steps the LR scheduler once more after loading it (see _plain.py)."""
from _plain import main

if __name__ == "__main__":
    main("sched_twice")
