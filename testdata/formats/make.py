"""Writes the parquet, TFRecord and WebP fixtures of tests/it/formats.rs with the real writers.

    python3 -m venv /opt/fmt && /opt/fmt/bin/pip install datasets tensorflow-cpu pillow
    cd testdata/formats && /opt/fmt/bin/python make.py

(Written with datasets 5.2.0, pyarrow 26.0.1, TensorFlow 2.21.0, Pillow 13.0.0.) Every
container holds the images of `files.txt` (testdata/classes, labels by sorted class folder),
in its order: the tests check that each delivers the same pixels and labels as the list.
"""
import io
import os
import shutil

import datasets
import numpy as np
import tensorflow as tf
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES = os.path.join(HERE, "..", "classes")


def listing():
    names = sorted(os.listdir(CLASSES))
    out = []
    for label, name in enumerate(names):
        folder = os.path.join(CLASSES, name)
        for f in sorted(os.listdir(folder)):
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                out.append((f"../classes/{name}/{f}", label))
    return names, out


def write_list(rows):
    with open(os.path.join(HERE, "files.txt"), "w") as f:
        for path, label in rows:
            f.write(f"{path}\t{label}\n")


def write_parquet(names, rows):
    """Two shards as `datasets` writes them for the Hub: image struct<bytes, path>, ClassLabel."""
    out = os.path.join(HERE, "parquet")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=names)}
    )
    ds = datasets.Dataset.from_dict(
        {
            "image": [os.path.join(HERE, p) for p, _ in rows],
            "label": [l for _, l in rows],
        },
        features=features,
    )
    # Embed the files' bytes, as push_to_hub does (a path alone would point off this machine).
    ds = ds.cast_column("image", datasets.Image(decode=False))
    ds = ds.map(
        lambda r: {"image": {"bytes": open(r["image"]["path"], "rb").read(),
                             "path": os.path.basename(r["image"]["path"])}},
        features=datasets.Features({"image": datasets.Image(decode=False),
                                    "label": datasets.ClassLabel(names=names)}),
    )
    ds = ds.cast_column("image", datasets.Image())
    for i in range(2):
        shard = ds.shard(num_shards=2, index=i, contiguous=True)
        shard.to_parquet(os.path.join(out, f"train-{i:05d}-of-00002.parquet"))
    # One row group a row: several streams per file.
    ds.shard(num_shards=2, index=0, contiguous=True).to_parquet(
        os.path.join(HERE, "small-groups.parquet"), batch_size=1
    )


def example(data, label, image_key="image/encoded", label_key="image/class/label"):
    img = Image.open(io.BytesIO(data))
    feature = {
        image_key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
        label_key: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.format.encode()])),
        "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[img.height])),
        "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[img.width])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_tfrecords(rows):
    """The ImageNet build script's keys in `train-0000N-of-00002`; TFDS's keys, gzipped."""
    datas = [(open(os.path.join(HERE, p), "rb").read(), l) for p, l in rows]
    half = (len(datas) + 1) // 2
    out = os.path.join(HERE, "tfrecord")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for i, part in enumerate([datas[:half], datas[half:]]):
        with tf.io.TFRecordWriter(os.path.join(out, f"train-{i:05d}-of-00002")) as w:
            for data, label in part:
                w.write(example(data, label))
    gz = os.path.join(HERE, "gzip")
    shutil.rmtree(gz, ignore_errors=True)
    os.makedirs(gz)
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    path = os.path.join(gz, "fixture-train.tfrecord-00000-of-00001")
    with tf.io.TFRecordWriter(path, options) as w:
        for data, label in datas:
            w.write(example(data, label, "image", "label"))


def write_webp():
    """Lossy and lossless WebP (one with alpha), and Pillow's decoding of each as PNG."""
    out = os.path.join(HERE, "webp")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    photo = Image.open(os.path.join(HERE, "..", "photos", "photo_0.jpg")).convert("RGB")
    photo = photo.resize((200, 150))
    rgba = Image.open(os.path.join(HERE, "..", "valid", "rgba.png")).convert("RGBA")
    made = [
        ("lossy.webp", photo, dict(quality=80)),
        ("lossless.webp", photo, dict(lossless=True)),
        ("lossless_alpha.webp", rgba, dict(lossless=True)),
        ("lossy_alpha.webp", rgba, dict(quality=90)),
    ]
    for name, img, kw in made:
        path = os.path.join(out, name)
        img.save(path, "WEBP", **kw)
        Image.open(path).convert("RGB").save(path.replace(".webp", ".png"))


if __name__ == "__main__":
    names, rows = listing()
    write_list(rows)
    write_parquet(names, rows)
    write_tfrecords(rows)
    write_webp()
    for root, _, files in os.walk(HERE):
        for f in sorted(files):
            p = os.path.join(root, f)
            print(f"{os.path.relpath(p, HERE)}: {os.path.getsize(p)} bytes")
