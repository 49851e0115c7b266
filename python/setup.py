"""Builds libdetcheck and the detcheck CLI from this repository (the parent
folder: one copy of the C code) and bundles them into the package as
detcheck/_native/. DETCHECK_PREBUILT=BUILD_DIR bundles an existing build
folder (make BUILD=... all) instead of running make (by default
`make all` in the repository's own build/, so that a `make` before it leaves
nothing to compile again) (a relative path is
resolved against the directory pip was started in, not python/);
DETCHECK_MAKE_JOBS sets make's -j (default: the CPUs)."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _caller_dirs():
    """Where the command that installs the package was started, first to
    last choice: pip runs this hook with python/ (the source tree) as its
    working directory, so os.getcwd() is not the caller's. The parent
    process (pip, or python -m build) keeps the caller's directory (Linux:
    /proc/PPID/cwd); $PWD is the shell's; os.getcwd() is the last resort."""
    out = []
    try:
        out.append(os.readlink("/proc/%d/cwd" % os.getppid()))
    except OSError:
        pass
    if os.environ.get("PWD"):
        out.append(os.environ["PWD"])
    out.append(os.getcwd())
    return out


def _prebuilt(pre):
    """DETCHECK_PREBUILT as an absolute path: a relative value is resolved
    against the caller's directory (where `pip install` was started), not
    against python/."""
    if os.path.isabs(pre):
        return pre
    tried = []
    for base in _caller_dirs():
        p = os.path.normpath(os.path.join(base, pre))
        if os.path.isdir(p):
            return p
        if p not in tried:
            tried.append(p)
    raise SystemExit("detcheck: DETCHECK_PREBUILT=%s is not a build folder (tried %s); give an "
                     "absolute path, or run pip from the folder it is relative to" % (pre, ", ".join(tried)))


def _build_dir():
    pre = os.environ.get("DETCHECK_PREBUILT")
    if pre:
        return _prebuilt(pre)
    if not os.path.exists(os.path.join(REPO, "include", "detcheck.h")):
        raise SystemExit("detcheck: %s is not the detcheck repository; install with "
                         "`pip install ./python` from a clone (or set DETCHECK_PREBUILT)" % REPO)
    # make's own build folder, where `make` (and `make demo`, `make check`)
    # builds: after them the package is bundled without compiling the C
    # code a second time, and make rebuilds only what changed
    build = os.path.join(REPO, "build")
    jobs = os.environ.get("DETCHECK_MAKE_JOBS") or str(os.cpu_count() or 1)
    subprocess.check_call(["make", "-C", REPO, "-j" + jobs, "BUILD=" + build, "all"])
    return build


class build_py(_build_py):
    def run(self):
        super().run()
        build = _build_dir()
        lib = os.path.join(build, "libdetcheck.so.0")
        cli = os.path.join(build, "detcheck")
        for p in (lib, cli):
            if not os.path.exists(p):
                raise SystemExit("detcheck: %s is missing (make BUILD=%s all)" % (p, build))
        native = os.path.join(self.build_lib, "detcheck", "_native")
        os.makedirs(native, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), os.path.join(native, "libdetcheck.so.0"))
        shutil.copy2(cli, os.path.join(native, "detcheck"))


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": build_py}, distclass=BinaryDistribution)
