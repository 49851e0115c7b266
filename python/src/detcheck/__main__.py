"""``python -m detcheck ARGS``: runs the detcheck command-line tool installed
with the package ($DETCHECK, or detcheck on PATH, when none is), with
the same arguments: ``python -m detcheck repro -- python train.py`` is
``detcheck repro -- python train.py`` (detcheck-repro(1))."""
import os
import shutil
import sys
import sysconfig

NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")


def _installed_scripts():
    """Where pip put the package's detcheck script: bin/ beside a --target
    folder, the scripts folder of this interpreter's install (a venv's bin/
    even when not activated), of a --user install."""
    out = [os.path.join(os.path.dirname(os.path.dirname(NATIVE)), "bin"), sysconfig.get_path("scripts")]
    if "posix_user" in sysconfig.get_scheme_names():
        out.append(sysconfig.get_path("scripts", "posix_user"))
    return [os.path.join(d, "detcheck") for d in out if d]


def cli_path():
    """Path of the detcheck binary this package runs."""
    for p in (os.environ.get("DETCHECK"), os.path.join(NATIVE, "detcheck"), *_installed_scripts(),
              shutil.which("detcheck")):
        if p and os.access(p, os.X_OK):
            return p
    raise SystemExit("detcheck: no detcheck binary (installed by pip with the package; or set DETCHECK)")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = cli_path()
    sys.stdout.flush()
    os.execv(path, [path] + list(argv))


if __name__ == "__main__":
    main()
