"""A correct plain loop for detcheck resume-check: examples/python/resume_train.py
itself (run from here so that the example stays what the tests check)."""
import os
import runpy
import sys

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python",
                       "resume_train.py")

if __name__ == "__main__":
    sys.argv[0] = EXAMPLE
    runpy.run_path(EXAMPLE, run_name="__main__")
