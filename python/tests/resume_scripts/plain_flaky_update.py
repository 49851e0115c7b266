"""Negative control for detcheck resume-check: the plain loop of
examples/python/resume_train.py, resumed correctly, whose stop run's
optimizer update of step 2 differs by one ULP in one weight (gradients and
moments equal): two runs of the command part before the stop (see _plain.py)."""
from _plain import main

if __name__ == "__main__":
    main("flaky_update")
