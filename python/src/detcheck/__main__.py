"""``python -m detcheck ARGS``: runs the detcheck command-line tool bundled
with the package ($DETCHECK, or detcheck on PATH, when none is bundled), with
the same arguments: ``python -m detcheck repro -- python train.py`` is
``detcheck repro -- python train.py`` (detcheck-repro(1))."""
import os
import shutil
import sys

NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")


def cli_path():
    """Path of the detcheck binary this package runs."""
    for p in (os.environ.get("DETCHECK"), os.path.join(NATIVE, "detcheck"), shutil.which("detcheck")):
        if p and os.access(p, os.X_OK):
            return p
    raise SystemExit("detcheck: no detcheck binary (bundled by pip install ./python; or set DETCHECK)")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = cli_path()
    sys.stdout.flush()
    os.execv(path, [path] + list(argv))


if __name__ == "__main__":
    main()
