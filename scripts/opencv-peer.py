#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The cuawait-images pipeline as an OpenCV user writes it: the peer of the benchmark.

    scripts/opencv-peer.py INPUT_DIR -o OUT [--threads 16] [--limit N] [--no-write]
    scripts/opencv-peer.py --compare PEER_OUT APP_OUT

Per image, on a pool of --threads Python threads (concurrent.futures), with OpenCV's own
threading off (cv2.setNumThreads(1)) so that the pool is the only parallelism:

- cv2.imread(path, cv2.IMREAD_ANYCOLOR): gray files stay gray, colour files come as BGR,
  and OpenCV applies the EXIF orientation (it does unless IMREAD_IGNORE_ORIENTATION or
  IMREAD_UNCHANGED is given), as cuawait-images does;
- gray floats in [0, 1]: cvtColor(BGR2GRAY) of the float image (0.299 R + 0.587 G +
  0.114 B), divided by 255;
- cv2.sepFilter2D with the app's kernel (1 4 6 4 1)/16 in x and y, borders replicated;
- cv2.Sobel (3 x 3) in x and y, borders replicated; cv2.cartToPolar in degrees;
- the histogram of oriented gradients with numpy.bincount: 4 x 4 cells, 9 unsigned bins of
  20 degrees, magnitudes summed in double;
- edge bytes min(255, floor(magnitude * 255/4 + 0.5)); cv2.imwrite PNG, compression 1.

Outputs mirror the input tree as the app's do (OUT/a/b/x.edges.png) and features go to
OUT/features.jsonl in the app's format. The summary line gives images/s over the timed
region: from the first image's submission to the last one's end, reading, decoding and
writing included.

--compare PEER_OUT APP_OUT prints how far the peer's outputs are from the app's: image
sizes (EXIF orientation), edge bytes (max and mean absolute difference, share of pixels
more than one level apart) and histograms (relative L1 difference). The two differ by
construction where OpenCV's arithmetic is not the app's: cartToPolar's angle is accurate
to about 0.3 degrees, so a few pixels near a bin boundary land in the neighbouring bin,
and the filters add their taps in another order. Tolerance: at most 1% of the edge pixels
more than one level apart and a relative L1 difference of each histogram of at most 2%;
the exit status is 1 beyond it.
"""

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

EXTENSIONS = (".png", ".jpg", ".jpeg", ".pgm", ".ppm", ".pnm")
EDGE_TOLERANCE = 0.01  # share of edge pixels more than one level off
HOG_TOLERANCE = 0.02   # relative L1 difference of a histogram


def inputs_of(root):
    """The files the app's recursive scan takes, in path order, as (path, relative)."""
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for f in files:
            if f.startswith(".") or not f.lower().endswith(EXTENSIONS):
                continue
            if f.endswith((".edges.png", ".edges.jpg")):
                continue
            path = os.path.join(d, f)
            found.append((path, os.path.relpath(path, root)))
    found.sort(key=lambda p: p[1])
    return found


class Pipeline:
    def __init__(self, cv2, np):
        self.cv2 = cv2
        self.np = np
        self.kernel = np.array([1, 4, 6, 4, 1], np.float32) / np.float32(16)
        self.cells = {}  # (h, w) -> cell index * 9 of each pixel
        self.lock = threading.Lock()

    def cell_base(self, h, w):
        key = (h, w)
        base = self.cells.get(key)
        if base is None:
            np = self.np
            cy = (np.arange(h, dtype=np.int64) * 4) // h
            cx = (np.arange(w, dtype=np.int64) * 4) // w
            base = ((cy[:, None] * 4 + cx[None, :]) * 9).astype(np.int32)
            with self.lock:
                self.cells[key] = base
        return base

    def run(self, path, out_path):
        cv2, np = self.cv2, self.np
        img = cv2.imread(path, cv2.IMREAD_ANYCOLOR)  # applies the EXIF orientation
        if img is None:
            raise ValueError("cv2.imread cannot read it")
        if img.ndim == 3:
            gray = cv2.cvtColor(img.astype(np.float32), cv2.COLOR_BGR2GRAY) / np.float32(255)
        else:
            gray = img.astype(np.float32) / np.float32(255)
        h, w = gray.shape
        blurred = cv2.sepFilter2D(gray, cv2.CV_32F, self.kernel, self.kernel,
                                  borderType=cv2.BORDER_REPLICATE)
        gx = cv2.Sobel(blurred, cv2.CV_32F, 1, 0, ksize=3, borderType=cv2.BORDER_REPLICATE)
        gy = cv2.Sobel(blurred, cv2.CV_32F, 0, 1, ksize=3, borderType=cv2.BORDER_REPLICATE)
        mag, ang = cv2.cartToPolar(gx, gy, angleInDegrees=True)
        # Unsigned bins of 20 degrees: the angle is in [0, 360), so its 20-degree sector
        # modulo 9 folds the lower half plane onto the upper one.
        bins = (ang * np.float32(1.0 / 20.0)).astype(np.int32)
        bins %= 9
        idx = bins
        idx += self.cell_base(h, w)
        hog = np.bincount(idx.ravel(), weights=mag.ravel().astype(np.float64), minlength=144)
        if out_path is not None:
            edges = np.minimum(mag * np.float32(63.75) + np.float32(0.5),
                               np.float32(255)).astype(np.uint8)
            os.makedirs(os.path.dirname(out_path), exist_ok=True)
            if not cv2.imwrite(out_path, edges, [cv2.IMWRITE_PNG_COMPRESSION, 1]):
                raise OSError("cv2.imwrite failed: " + out_path)
        return w, h, hog


def run_batch(a):
    import cv2
    import numpy as np
    cv2.setNumThreads(1)
    files = inputs_of(a.input)
    if a.limit:
        files = files[:a.limit]
    if not files:
        print("opencv-peer: no images in " + a.input, file=sys.stderr)
        return 2
    pipeline = Pipeline(cv2, np)
    records = [None] * len(files)
    failed = 0

    def job(k):
        path, rel = files[k]
        out_path = None
        if not a.no_write:
            out_path = os.path.join(a.output, os.path.splitext(rel)[0] + ".edges.png")
        w, h, hog = pipeline.run(path, out_path)
        return json.dumps({"file": path, "width": w, "height": h, "cells": 4, "bins": 9,
                           "hog": [float("%.9g" % v) for v in hog]}, separators=(",", ":"))

    with ThreadPoolExecutor(max_workers=a.threads) as pool:
        t0 = time.monotonic()
        futures = [pool.submit(job, k) for k in range(len(files))]
        for k, f in enumerate(futures):
            try:
                records[k] = f.result()
            except Exception as e:  # one bad file does not stop the batch
                failed += 1
                print("opencv-peer: %s: %s" % (files[k][0], e), file=sys.stderr)
        dt = time.monotonic() - t0
    ok = len(files) - failed
    if not a.no_write:
        os.makedirs(a.output, exist_ok=True)
        with open(os.path.join(a.output, "features.jsonl"), "w") as f:
            for r in records:
                if r is not None:
                    f.write(r + "\n")
    print("opencv-peer: %d images in %.3f s, %.1f images/s (successful ones): %d ok, %d failed "
          "(%d Python threads, cv2 %s with setNumThreads(1))"
          % (len(files), dt, ok / dt if dt > 0 else 0.0, ok, failed, a.threads, cv2.__version__))
    return 1 if failed else 0


def features_by_name(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                out[os.path.basename(r["file"])] = r
    return out


def compare(peer_dir, app_dir):
    import cv2
    import numpy as np
    try:
        peer = features_by_name(os.path.join(peer_dir, "features.jsonl"))
        app = features_by_name(os.path.join(app_dir, "features.jsonl"))
    except OSError as e:
        print("opencv-peer: --compare: %s" % e, file=sys.stderr)
        return 2
    common = sorted(set(peer) & set(app))
    shape_mismatch = 0
    hog_rel = []
    for name in common:
        p, q = peer[name], app[name]
        if (p["width"], p["height"]) != (q["width"], q["height"]):
            shape_mismatch += 1
            continue
        a = np.array(p["hog"], np.float64)
        b = np.array(q["hog"], np.float64)
        norm = np.abs(b).sum()
        hog_rel.append(np.abs(a - b).sum() / norm if norm > 0 else np.abs(a).sum())
    rels = []
    for d, _, files in os.walk(peer_dir):
        for f in files:
            if f.endswith(".edges.png"):
                rels.append(os.path.relpath(os.path.join(d, f), peer_dir))

    def one(rel):  # (max, sum, pixels more than 1 level apart, pixels) or None
        x = cv2.imread(os.path.join(peer_dir, rel), cv2.IMREAD_UNCHANGED)
        y = cv2.imread(os.path.join(app_dir, rel), cv2.IMREAD_UNCHANGED)
        if x is None or y is None or x.shape != y.shape:
            return None
        diff = np.abs(x.astype(np.int16) - y.astype(np.int16))
        return int(diff.max()), float(diff.sum()), int((diff > 1).sum()), diff.size

    max_diff = 0
    sum_diff = 0.0
    over_one = 0
    pixels = 0
    edge_files = 0
    # cv2 and numpy release the GIL: the files are read and compared on all cores.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        for r in pool.map(one, rels):
            if r is None:
                continue
            max_diff = max(max_diff, r[0])
            sum_diff += r[1]
            over_one += r[2]
            pixels += r[3]
            edge_files += 1
    share = over_one / pixels if pixels else 0.0
    worst = max(hog_rel) if hog_rel else 0.0
    mean = sum(hog_rel) / len(hog_rel) if hog_rel else 0.0
    within = (shape_mismatch == 0 and share <= EDGE_TOLERANCE and worst <= HOG_TOLERANCE
              and len(common) > 0)
    print("compare %s with %s: %d records in both, %d of different size (EXIF orientation); "
          "%d edge images: max abs difference %d, mean %.4f levels, %.3f%% of pixels more than "
          "1 level apart; HOG relative L1 difference max %.4f, mean %.5f; within tolerance "
          "(edge pixels > 1 level apart <= %g%%, HOG <= %g): %s"
          % (peer_dir, app_dir, len(common), shape_mismatch, edge_files, max_diff,
             sum_diff / pixels if pixels else 0.0, 100 * share, worst, mean,
             100 * EDGE_TOLERANCE, HOG_TOLERANCE, "yes" if within else "NO"))
    return 0 if within else 1


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input", nargs="?", help="input directory (searched recursively)")
    p.add_argument("-o", "--output", default="out/opencv-peer", help="output directory")
    p.add_argument("--threads", type=int, default=16, help="pool threads (default 16)")
    p.add_argument("--limit", type=int, default=0, help="first N images only (0: all)")
    p.add_argument("--no-write", action="store_true", help="write no edge images or features")
    p.add_argument("--compare", nargs=2, metavar=("PEER_OUT", "APP_OUT"),
                   help="compare two output directories instead of running")
    a = p.parse_args(argv)
    if a.compare:
        return compare(*a.compare)
    if not a.input or a.threads < 1:
        p.error("an input directory and --threads >= 1 are needed")
    return run_batch(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
