#!/usr/bin/env python3
"""Reads a PNG that Chromium rendered from a detcheck page (PIL, Debian's
python3-pil) and prints where an exact colour is, so tests check the picture:

  png_probe.py PNG boxes '#rrggbb'   the colour's 8-connected regions, one per
                                     line: x0 y0 x1 y1 pixels (inclusive, top
                                     to bottom, then left to right)
  png_probe.py PNG count '#rrggbb'   its pixels
  png_probe.py PNG at X Y            the colour at (X, Y) as #rrggbb
  png_probe.py PNG size              width height

Regions smaller than --min pixels (default 4: anti-aliased edges) are left out.
"""
import sys
from PIL import Image


def rgb(spec):
    spec = spec.lstrip("#")
    return tuple(int(spec[i:i + 2], 16) for i in (0, 2, 4))


def pixels(img, colours):
    """The pixels of each exact colour (RGB tuples): {colour: {(x, y)}}."""
    w = img.size[0]
    data = img.tobytes()
    out = {}
    for c in colours:
        key, hits = bytes(c), set()
        pos = data.find(key)
        while pos >= 0:
            if pos % 3 == 0:
                p = pos // 3
                hits.add((p % w, p // w))
            pos = data.find(key, pos + 1)
        out[c] = hits
    return out


def regions(hits, minpix=1):
    """8-connected regions of a set of pixels (consumed): [(x0, y0, x1, y1,
    pixels)], inclusive, top to bottom then left to right."""
    boxes = []
    while hits:
        seed = hits.pop()
        stack, x0, y0, x1, y1, n = [seed], seed[0], seed[1], seed[0], seed[1], 0
        while stack:
            x, y = stack.pop()
            n += 1
            x0, y0, x1, y1 = min(x0, x), min(y0, y), max(x1, x), max(y1, y)
            for dx in (-1, 0, 1):
                for dy in (-1, 0, 1):
                    q = (x + dx, y + dy)
                    if q in hits:
                        hits.remove(q)
                        stack.append(q)
        if n >= minpix:
            boxes.append((y0, x0, x1, y1, n))
    return [(x0, y0, x1, y1, n) for y0, x0, x1, y1, n in sorted(boxes)]


def main(argv):
    minpix = 4
    if "--min" in argv:
        k = argv.index("--min")
        minpix = int(argv[k + 1])
        del argv[k:k + 2]
    img = Image.open(argv[1]).convert("RGB")
    w, h = img.size
    op = argv[2]
    if op == "size":
        print(w, h)
        return 0
    if op == "at":
        print("#%02x%02x%02x" % img.getpixel((int(argv[3]), int(argv[4]))))
        return 0
    want = rgb(argv[3])
    hits = pixels(img, [want])[want]
    if op == "count":
        print(len(hits))
        return 0
    if op != "boxes":
        print("unknown operation " + op, file=sys.stderr)
        return 2
    for box in regions(hits, minpix):
        print(*box)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
