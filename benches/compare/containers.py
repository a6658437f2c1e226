"""Writes a file list's images as parquet shards (with `datasets`, as the Hub holds them) and
as TFRecord shards (with TensorFlow, the ImageNet build script's keys), in the list's order,
for `imagefeed bench` to compare with the list (docs/PERFORMANCE.md, "Parquet and TFRecord").

    /opt/fmt/bin/python benches/compare/containers.py /tmp/c5k/files.txt /tmp/c5k-formats 5

writes OUT/parquet/train-0000K-of-0000N.parquet and OUT/tfrecord/train-0000K-of-0000N.
(`python3 -m venv /opt/fmt && /opt/fmt/bin/pip install datasets tensorflow-cpu pillow`.)
"""
import os
import sys

import datasets
import tensorflow as tf


def main(listing, out, shards):
    base = os.path.dirname(os.path.abspath(listing))
    rows = []
    for line in open(listing):
        line = line.strip()
        if line and not line.startswith("#"):
            path, label = line.rsplit(None, 1)
            rows.append((os.path.join(base, path), int(label)))
    n = len(rows)
    classes = max(l for _, l in rows) + 1
    pq = os.path.join(out, "parquet")
    tr = os.path.join(out, "tfrecord")
    os.makedirs(pq, exist_ok=True)
    os.makedirs(tr, exist_ok=True)
    for k in range(shards):
        part = rows[k * n // shards:(k + 1) * n // shards]
        data = [open(p, "rb").read() for p, _ in part]
        ds = datasets.Dataset.from_dict(
            {
                "image": [{"bytes": d, "path": os.path.basename(p)} for d, (p, _) in zip(data, part)],
                "label": [l for _, l in part],
            },
            features=datasets.Features(
                {
                    "image": datasets.Image(),
                    "label": datasets.ClassLabel(names=[f"class_{c:02d}" for c in range(classes)]),
                }
            ),
        )
        ds.to_parquet(os.path.join(pq, f"train-{k:05d}-of-{shards:05d}.parquet"))
        with tf.io.TFRecordWriter(os.path.join(tr, f"train-{k:05d}-of-{shards:05d}")) as w:
            for d, (_, label) in zip(data, part):
                feature = {
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[d])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                    "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
                }
                w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
