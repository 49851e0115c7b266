"""Installing the package: DETCHECK_PREBUILT relative to where pip runs
(not to python/, where pip runs the build hook)."""
import os
import shutil
import subprocess
import sys

import pytest

import detcheck
from conftest import cli_path

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_prebuilt_relative_to_the_caller(tmp_path):
    try:
        import setuptools  # noqa: F401
        import pip  # noqa: F401
    except ImportError as e:
        pytest.skip("no pip or setuptools to install with (%s)" % e)
    src = tmp_path / "src"
    shutil.copytree(PYTHON_DIR, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__",
                                                                   "_native", "tests"))
    work = tmp_path / "work"
    (work / "bld").mkdir(parents=True)
    shutil.copy2(os.path.realpath(detcheck.LIB_PATH), work / "bld" / "libdetcheck.so.0")
    shutil.copy2(cli_path(), work / "bld" / "detcheck")
    env = dict(os.environ, DETCHECK_PREBUILT="bld", PWD=str(work))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--no-index", "--disable-pip-version-check", "--target", "site", "../src"],
                       cwd=work, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "site" / "detcheck" / "_native" / "libdetcheck.so.0").is_file()
    # a value that names nothing says what it tried
    env["DETCHECK_PREBUILT"] = "nowhere"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--no-index", "--disable-pip-version-check", "--target", "site2", "../src"],
                       cwd=work, env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "DETCHECK_PREBUILT=nowhere is not a build folder" in r.stdout + r.stderr


def test_pip_builds_in_makes_own_build_folder(tmp_path):
    """pip install ./python runs make in the repository's own build/:
    after `make` the C code is not compiled a second time into
    a folder of pip's own. A make on PATH that records its arguments stands
    in for the real one (the repository a copy of python/ beside an
    include/detcheck.h)."""
    try:
        import setuptools  # noqa: F401
        import pip  # noqa: F401
    except ImportError as e:
        pytest.skip("no pip or setuptools to install with (%s)" % e)
    repo = tmp_path / "repo"
    shutil.copytree(PYTHON_DIR, repo / "python", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__",
                                                                              "_native", "tests"))
    (repo / "include").mkdir()
    (repo / "include" / "detcheck.h").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "make.log"
    make = bin_dir / "make"
    make.write_text("#!/bin/sh\necho \"$@\" >> %s\nfor a; do case $a in BUILD=*) b=${a#BUILD=} ;; esac; done\n"
                    "mkdir -p \"$b\" && : > \"$b/libdetcheck.so.0\" && : > \"$b/detcheck\" && chmod +x \"$b/detcheck\"\n"
                    % log)
    make.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DETCHECK_PREBUILT"}
    env.update(PATH=str(bin_dir) + os.pathsep + env.get("PATH", ""), PWD=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--no-index", "--disable-pip-version-check", "--target", str(tmp_path / "site"),
                        str(repo / "python")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = log.read_text().splitlines()
    assert len(calls) == 1, calls
    assert "BUILD=%s" % (repo / "build") in calls[0].split(), calls
    assert (tmp_path / "site" / "bin" / "detcheck").is_file()
