#!/usr/bin/env python3
"""The check of the paths that comments name: every "src/...", "include/...",
"cuda/..." and "tests/..." path in a comment of a source or header under
src/, include/ and cuda/ exists in the tree, and so does every source a
comment names by its layer ("runs/trajectory.c": src/runs/trajectory.c), so
that a file moved or removed leaves no comment pointing at it.

    ci/comment_paths.py [TOP]

TOP is the project root (default: the folder above this script). A path is
a file (its last part has an extension: NAME.EXT) or a folder (it ends with
'/'); other words with a slash ("--device cuda/twin") are not paths. One
with a placeholder in capitals or a wildcard (src/LAYER/*.c, cmd_NAME.c)
stands for many files and is not looked up. Prints each stale path as
FILE:LINE: PATH and exits 1; 0 when every path exists.
"""
import os
import re
import sys

ROOTS = ("src", "include", "cuda")
SOURCES = (".c", ".h", ".cu", ".cuh")
PATH = re.compile(r"(?<![\w./-])((?:src|include|cuda|tests)/[\w./*-]*)")
FILE_OR_FOLDER = re.compile(r"(/|\.\w+)$")
SOURCE_IN_LAYER = r"(?<![\w./-])((?:%s)/[\w-]+\.(?:c|h|cu))\b"
# a comment, or a literal to step over (its text is code, not a comment)
TOKEN = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def comments(text):
    """(line, text) of each comment of a C or CUDA source."""
    for m in TOKEN.finditer(text):
        if m.group().startswith("/"):
            yield text.count("\n", 0, m.start()) + 1, m.group()


def stale(top):
    found = []
    layers = sorted(d for d in os.listdir(os.path.join(top, "src")) if os.path.isdir(os.path.join(top, "src", d)))
    in_layer = re.compile(SOURCE_IN_LAYER % "|".join(map(re.escape, layers)))
    for root in ROOTS:
        for folder, dirs, files in os.walk(os.path.join(top, root)):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, top).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for line, comment in comments(text):
                    for pattern, under in ((PATH, ""), (in_layer, "src/")):
                        for m in pattern.finditer(comment):
                            p = m.group(1).rstrip(".-")
                            if not FILE_OR_FOLDER.search(p) or "*" in p or re.search(r"[A-Z]{3,}", p):
                                continue  # not a path, or one that stands for many files
                            if not os.path.exists(os.path.join(top, under + p)):
                                found.append((rel, line + comment.count("\n", 0, m.start()), under + p))
    return found


def main(argv):
    top = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = stale(top)
    for rel, line, p in found:
        print(f"{rel}:{line}: {p} does not exist")
    if found:
        print(f"comment paths: {len(found)} stale")
        return 1
    print("comment paths: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
