"""Writes the `parquet` fuzz target's seeds, fuzz/seeds/parquet/, with pyarrow (26.0.1 wrote
the committed ones): small files in the layouts and encodings that Source::from_parquet reads
or refuses, each row's image a small JPEG of fuzz/seeds/images/.

    /opt/fmt/bin/python fuzz/seeds/make_parquet.py   # any python with pyarrow
"""
import os

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "parquet")
IMAGES = os.path.join(HERE, "images")


def small_jpegs(n):
    names = sorted(f for f in os.listdir(IMAGES) if f.endswith(".jpg"))
    out = []
    for f in names:
        with open(os.path.join(IMAGES, f), "rb") as fh:
            data = fh.read()
        if len(data) < 2500:
            out.append(data)
        if len(out) == n:
            break
    return out


def write(name, table, **kw):
    pq.write_table(table, os.path.join(OUT, name), **kw)


def main():
    os.makedirs(OUT, exist_ok=True)
    imgs = small_jpegs(4)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    images = pa.array(
        [{"bytes": b, "path": f"{i}.jpg"} for i, b in enumerate(imgs)], type=image_type
    )
    labels = pa.array(list(range(len(imgs))), type=pa.int64())
    hub = pa.table({"image": images, "label": labels}).replace_schema_metadata(
        {"huggingface": '{"info": {"features": {"image": {"_type": "Image"}}}}'}
    )
    # The datasets layout as the Hub writes it: snappy, dictionary pages, 2 rows a group.
    write("hub.parquet", hub, row_group_size=2)
    write("hub-plain.parquet", hub, compression="none", use_dictionary=False)
    write("hub-gzip.parquet", hub, compression="gzip", row_group_size=1)
    # A plain binary image column, a null image, an int32 label.
    binary = pa.table(
        {
            "image": pa.array(imgs[:2] + [None], type=pa.binary()),
            "label": pa.array([0, 1, 2], type=pa.int32()),
        }
    )
    write("binary-null.parquet", binary, compression="none")
    # Unlabelled; and a label column of the wrong type (refused).
    write("unlabelled.parquet", pa.table({"image": images}), compression="none")
    write(
        "string-label.parquet",
        pa.table({"image": images, "label": pa.array(["a", "b", "c", "d"][: len(imgs)])}),
        compression="none",
    )
    # Data page v2 and a null label.
    write(
        "v2-null-label.parquet",
        pa.table({"image": images, "label": pa.array([1, None, 2, 3][: len(imgs)], type=pa.int64())}),
        data_page_version="2.0",
        compression="none",
    )


if __name__ == "__main__":
    main()
