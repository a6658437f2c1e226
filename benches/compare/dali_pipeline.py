#!/usr/bin/env python3
"""NVIDIA DALI's CPU pipeline (`pip install nvidia-dali-cuda120`; no GPU needed), measured the way
`imagefeed bench` measures: Pipeline(batch_size=64, num_threads=N, device_id=None), every operator
on the CPU, fn.readers.file over the list's files and labels (random_shuffle, initial_fill 1000),
then

--transform random-resized-crop (default): fn.decoders.image_random_crop (area (0.08, 1), aspect
  ratio (3/4, 4/3), 10 attempts; on the CPU it decodes only the crop's region, with
  libjpeg-turbo) -> fn.resize to 160x160 (linear, antialiased) -> fn.crop_mirror_normalize
  (mirror from fn.random.coin_flip(0.5), /255 to float32, CHW as torchvision's);
--transform resize: fn.decoders.image (the whole image) -> fn.resize to 160x160 ->
  fn.crop_mirror_normalize (no mirror), for reference.

usage: dali_pipeline.py LIST [--epochs N] [--threads N] [--transform random-resized-crop|resize]
Prints one JSON object per epoch: epoch, images, seconds, images_per_sec, peak_rss_bytes (the
process's peak resident set so far, as tf_pipeline.py reports it).
An epoch is ceil(images / 64) batches of 64 (the reader wraps into the next epoch to fill the last
one), and `images` counts every image decoded in them. DALI runs two batches ahead of the consumer
(prefetch_queue_depth 2), across epoch boundaries too, so a later epoch is the steadier figure.
LIST has `PATH<TAB>LABEL` lines, paths relative to the list's folder.
"""
import json
import math
import resource
import sys
import time

from listfile import option, read_list

BATCH = 64


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    lst = args[0]
    epochs = option(args, "epochs", 1, int)
    threads = option(args, "threads", 2, int)
    transform = option(args, "transform", "random-resized-crop")
    if transform not in ("resize", "random-resized-crop"):
        sys.exit(f"--transform {transform}: expected random-resized-crop or resize")
    from nvidia.dali import fn, pipeline_def, types

    items = read_list(lst)

    @pipeline_def(batch_size=BATCH, num_threads=threads, device_id=None, seed=0)
    def pipe():
        jpegs, labels = fn.readers.file(files=[p for p, _ in items], labels=[l for _, l in items],
                                        random_shuffle=True, initial_fill=1000, name="reader")
        if transform == "random-resized-crop":
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0],
                                                   random_aspect_ratio=[3 / 4, 4 / 3],
                                                   num_attempts=10)
            mirror = fn.random.coin_flip(probability=0.5)
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            mirror = 0
        images = fn.resize(images, resize_x=160, resize_y=160, antialias=True)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[0.0], std=[255.0], mirror=mirror)
        return images, labels

    p = pipe()
    p.build()
    batches = math.ceil(len(items) / BATCH)
    for epoch in range(epochs):
        start = time.perf_counter()
        n = 0
        for _ in range(batches):
            images, _ = p.run()
            n += len(images)
        secs = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({"tool": "dali", "transform": transform, "threads": threads,
                          "epoch": epoch, "images": n, "seconds": secs, "images_per_sec": n / secs,
                          "peak_rss_bytes": peak}), flush=True)


if __name__ == "__main__":
    main()
