"""Negative control for detcheck resume-check: the plain loop of
examples/python/resume_train.py, except that its resume neither saves nor loads AdamW's state (see _plain.py)."""
from _plain import main

if __name__ == "__main__":
    main("no_optim_state")
