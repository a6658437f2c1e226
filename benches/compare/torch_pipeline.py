#!/usr/bin/env python3
"""The usual PyTorch input pipeline, measured the way `imagefeed bench` measures:
a map-style Dataset (torchvision.io.decode_jpeg, then a transform on the decoded uint8 tensor,
then /255 to float32) in a DataLoader(batch_size=64, shuffle=True, num_workers=N,
pin_memory=False).

usage: torch_pipeline.py LIST [--epochs N] [--workers N] [--transform resize|random-resized-crop]
--transform resize (default): the whole image resized to 160x160, antialiased.
--transform random-resized-crop: torchvision.transforms.v2 RandomResizedCrop(160,
antialias=True) (scale (0.08, 1), ratio (3/4, 4/3)) then RandomHorizontalFlip(0.5), the
ImageNet training recipe; torchvision decodes the whole image, then crops.
Prints one JSON object per epoch: epoch, images, seconds, images_per_sec, peak_rss_bytes
(the main process and its worker processes together, read from /proc every 8 batches).
LIST has `PATH<TAB>LABEL` lines, paths relative to the list's folder.
"""
import json
import os
import sys
import time

from listfile import option, read_list


def rss_tree(pid):
    """Resident bytes of `pid` and its children (DataLoader workers are processes)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return total


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    lst = args[0]
    epochs = option(args, "epochs", 1, int)
    workers = option(args, "workers", os.cpu_count(), int)
    transform = option(args, "transform", "resize")
    if transform not in ("resize", "random-resized-crop"):
        sys.exit(f"--transform {transform}: expected resize or random-resized-crop")
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    from torchvision.transforms import v2
    from torchvision.transforms.v2.functional import resize

    if transform == "resize":
        def tf(img):
            return resize(img, [160, 160], antialias=True)
    else:
        tf = v2.Compose([v2.RandomResizedCrop(160, antialias=True), v2.RandomHorizontalFlip(0.5)])

    items = read_list(lst)

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(items)

        def __getitem__(self, i):
            path, label = items[i]
            img = decode_jpeg(read_file(path), mode=ImageReadMode.RGB)
            img = tf(img)
            return img.float().div_(255.0), label

    def one_thread(_):
        torch.set_num_threads(1)

    torch.set_num_threads(1)
    dl = torch.utils.data.DataLoader(Files(), batch_size=64, shuffle=True, num_workers=workers,
                                     worker_init_fn=one_thread, persistent_workers=workers > 0,
                                     generator=torch.Generator().manual_seed(0))
    for epoch in range(epochs):
        start = time.perf_counter()
        n = 0
        peak = 0
        for i, (images, _) in enumerate(dl):
            n += int(images.shape[0])
            if i % 8 == 0:
                peak = max(peak, rss_tree(os.getpid()))
        secs = time.perf_counter() - start
        print(json.dumps({"tool": "torch", "transform": transform, "workers": workers,
                          "epoch": epoch, "images": n,
                          "seconds": secs, "images_per_sec": n / secs,
                          "peak_rss_bytes": peak}), flush=True)


if __name__ == "__main__":
    main()
