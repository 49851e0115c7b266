"""A correct plain loop (see _plain.py) that stops at K as the contract of
detcheck-resume-check(1) first read: should_stop(step) -> save -> exit 0, without
session().stopped(). A clean stop needs nothing more; --kill needs
stopped() (it writes stop.json, then SIGKILLs the process)."""
from _plain import main

if __name__ == "__main__":
    main(stop="exit")
