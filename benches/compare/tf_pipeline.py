#!/usr/bin/env python3
"""The tf.data pipeline from TensorFlow's guide, measured the way `imagefeed bench` measures:
shuffle(1000) -> map(decode_jpeg, resize 160x160, /255, AUTOTUNE) -> batch(64) -> prefetch.

usage: tf_pipeline.py LIST [--epochs N] [--cache FILE]
Prints one JSON object per epoch: epoch, images, seconds, images_per_sec, peak_rss_bytes.
LIST has `PATH<TAB>LABEL` lines, paths relative to the list's folder.
"""
import json
import os
import resource
import sys
import time

from listfile import option, read_list


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    lst = args[0]
    epochs = option(args, "epochs", 1, int)
    cache = option(args, "cache", None)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    items = read_list(lst)
    paths = [p for p, _ in items]
    labels = [l for _, l in items]

    def load(path, label):
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        img = tf.image.resize(img, [160, 160]) / 255.0
        return img, label

    ds = tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(1000, seed=0)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    if cache:
        ds = ds.cache(cache)
    ds = ds.batch(64).prefetch(tf.data.AUTOTUNE)
    for epoch in range(epochs):
        start = time.perf_counter()
        n = 0
        for images, _ in ds:
            n += int(images.shape[0])
        secs = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({"tool": "tf.data", "epoch": epoch, "images": n, "seconds": secs,
                          "images_per_sec": n / secs, "peak_rss_bytes": peak}), flush=True)


if __name__ == "__main__":
    main()
