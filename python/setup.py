"""Builds libdetcheck and the detcheck CLI from the C tree and packages them:
libdetcheck.so.0 into the package as detcheck/_native/ (for the bindings),
the detcheck executable as a script (pip puts it on PATH as `detcheck`), the
man pages and the shell completions as data (share/man, share/bash-completion,
share/zsh). The wheel is tagged py3-none-PLATFORM: no Python extension, one
wheel for every Python 3.

The C tree: csrc/ beside this file (an sdist: `make sdist` puts it there),
else the parent folder (a clone: one copy of the C code). make builds into
the tree's own build/ (`make all`), so that a `make` before it leaves nothing
to compile again. DETCHECK_PREBUILT=BUILD_DIR packages an existing build
folder instead of running make (`make wheel` gives it build-portable; a
relative path is resolved against the directory pip was started in, not
python/); DETCHECK_MAKE_JOBS sets make's -j (default: the CPUs)."""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py
from setuptools.dist import Distribution
# (setuptools has no build_scripts nor install_data of its own: distutils',
# setuptools' copy of it once setuptools is imported)
from distutils.command.build_scripts import build_scripts as _build_scripts
from distutils.command.install_data import install_data as _install_data

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70.1: the wheel package's
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))


def _c_tree():
    """The folder holding Makefile and include/detcheck.h, or None."""
    for d in (os.path.join(HERE, "csrc"), os.path.dirname(HERE)):
        if os.path.exists(os.path.join(d, "include", "detcheck.h")):
            return d
    return None


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


_BUILT = []


def _build_dir():
    """The build folder, made once per setup.py run (build_py, build_scripts
    and install_data all ask)."""
    if _BUILT:
        return _BUILT[0]
    pre = os.environ.get("DETCHECK_PREBUILT")
    if pre:
        build = _prebuilt(pre)
    else:
        tree = _c_tree()
        if tree is None:
            raise SystemExit("detcheck: no C tree at %s/csrc nor %s; install with `pip install ./python` "
                             "from a clone, from the sdist, or set DETCHECK_PREBUILT"
                             % (HERE, os.path.dirname(HERE)))
        # make's own build folder, where `make` (and `make demo`, `make
        # check`) builds: after them the package is made without compiling
        # the C code a second time, and make rebuilds only what changed
        build = os.path.join(tree, "build")
        jobs = os.environ.get("DETCHECK_MAKE_JOBS") or str(os.cpu_count() or 1)
        subprocess.check_call(["make", "-C", tree, "-j" + jobs, "BUILD=" + build, "all"])
    _BUILT.append(build)
    return build


def _built_file(name):
    p = os.path.join(_build_dir(), name)
    if not os.path.exists(p):
        raise SystemExit("detcheck: %s is missing (make BUILD=%s all)" % (p, _build_dir()))
    return p


def _data_files():
    """(folder under the install prefix, installed name, source) of the man
    pages (from the C tree) and the completions (from the build folder): a
    build folder or a copy of python/ without them installs without them,
    saying so (`make wheel` checks that its wheel has them all)."""
    out = []
    tree = _c_tree()
    for sec in ("1", "7"):
        for src in sorted(glob.glob(os.path.join(tree, "man", "*." + sec))) if tree else []:
            out.append(("share/man/man" + sec, os.path.basename(src), src))
    comp = os.path.join(_build_dir(), "completion")
    for folder, name, src in (("share/bash-completion/completions", "detcheck", "detcheck.bash"),
                              ("share/zsh/site-functions", "_detcheck", "_detcheck")):
        if os.path.exists(os.path.join(comp, src)):
            out.append((folder, name, os.path.join(comp, src)))
    return out


class build_py(_build_py):
    def run(self):
        super().run()
        native = os.path.join(self.build_lib, "detcheck", "_native")
        os.makedirs(native, exist_ok=True)
        shutil.copy2(os.path.realpath(_built_file("libdetcheck.so.0")), os.path.join(native, "libdetcheck.so.0"))


class build_scripts(_build_scripts):
    """The detcheck executable, copied as it is (setuptools' own step reads a
    script as Python text to rewrite its #! line)."""

    def get_source_files(self):
        return []  # built, not a source: nothing for an sdist to hold

    def run(self):
        self.mkpath(self.build_dir)
        self.copy_file(_built_file("detcheck"), os.path.join(self.build_dir, "detcheck"))


class install_data(_install_data):
    """The man pages and completions, under the names bash-completion and zsh
    look for (data_files would keep the source names)."""

    def run(self):
        files = _data_files()
        for folder, name, src in files:
            dest = os.path.join(self.install_dir, folder)
            self.mkpath(dest)
            out, _ = self.copy_file(src, os.path.join(dest, name))
            self.outfiles.append(out)
        if not any(f[0].startswith("share/man") for f in files):
            self.warn("detcheck: no man pages (no C tree beside %s): installed without them" % HERE)
        if not any("completion" in f[0] or "zsh" in f[0] for f in files):
            self.warn("detcheck: no completions in %s/completion: installed without them" % _build_dir())


class bdist_wheel(_bdist_wheel):
    """py3-none-PLATFORM: the package is Python and a native library loaded
    with ctypes, not an extension module, so one wheel serves every Python
    3; the platform is the build's (--plat-name for make wheel's
    manylinux_2_28_x86_64)."""

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class BinaryDistribution(Distribution):
    """The wheel holds a native library and executable: tag it for this
    platform (Root-Is-Purelib: false), with scripts and data to install."""

    def has_ext_modules(self):
        return True

    def has_data_files(self):
        return True


# scripts: the name of the one script build_scripts copies from the build
setup(cmdclass={"build_py": build_py, "build_scripts": build_scripts, "install_data": install_data,
                "bdist_wheel": bdist_wheel},
      distclass=BinaryDistribution, scripts=["detcheck"])
