"""Shared helpers: the detcheck CLI under test ($DETCHECK, else the bundled
one) and its JSON output."""
import json
import os
import subprocess

import pytest


def cli_path():
    from detcheck.__main__ import cli_path as p
    return p()


def run_cli(*args, check=True):
    r = subprocess.run([cli_path()] + [str(a) for a in args], capture_output=True, text=True)
    if check and r.returncode not in (0, 1):
        raise AssertionError("detcheck %s: exit %d\n%s%s" % (" ".join(map(str, args)), r.returncode,
                                                             r.stdout, r.stderr))
    return r


def cli_hash(path):
    """`detcheck hash --json PATH` as a dict."""
    return json.loads(run_cli("hash", "--json", path).stdout)


@pytest.fixture
def cli():
    return run_cli


def cli_tensors(doc):
    return {t["name"]: (t["group"], t["dtype"], tuple(t["shape"]), t["digest"]) for t in doc["tensors"]}


def cli_values(doc):
    return {v["name"]: v["value"] for v in doc.get("values", [])}
