#!/usr/bin/env python3
"""Checks that scripts/plot drew something: the file is a PNG, and each given colour covers at
least its share of the pixels.

    check_png.py IMAGE.png [RRGGBB:SHARE ...]

For example `ff7f0e:0.01` asks that at least 1% of the pixels be matplotlib's tab:orange (to
within 8 of 255 per channel: anti-aliased edges do not count). Exit 0 when every check passes,
1 naming the first that fails. Needs matplotlib (its imread) and numpy, as scripts/plot does.
"""
import sys


def main():
    if len(sys.argv) < 2:
        print("usage: check_png.py IMAGE.png [RRGGBB:SHARE ...]", file=sys.stderr)
        return 2
    path = sys.argv[1]
    try:
        with open(path, "rb") as f:
            signature = f.read(8)
    except OSError as e:
        print(f"check_png: {e}", file=sys.stderr)
        return 1
    if signature != b"\x89PNG\r\n\x1a\n":
        print(f"check_png: {path} is not a PNG file", file=sys.stderr)
        return 1
    import matplotlib.image
    import numpy as np
    rgb = np.round(matplotlib.image.imread(path)[:, :, :3] * 255).astype(int)
    height, width = rgb.shape[:2]
    print(f"check_png: {path}: {width} x {height} pixels")
    for check in sys.argv[2:]:
        colour, minimum = check.split(":")
        target = np.array([int(colour[i:i + 2], 16) for i in (0, 2, 4)])
        share = float((np.abs(rgb - target).max(axis=2) <= 8).mean())
        print(f"check_png: #{colour} covers {share:.2%} of the pixels (at least {float(minimum):.2%} expected)")
        if share < float(minimum):
            print(f"check_png: {path}: too little #{colour}: is the data drawn?", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
