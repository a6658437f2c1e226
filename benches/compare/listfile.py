"""What the comparison scripts share: their command-line options and imagefeed's list format."""
import os


def option(args, name, default, kind=str):
    """The value after `--name` in `args`, or `default`."""
    flag = "--" + name
    return kind(args[args.index(flag) + 1]) if flag in args else default


def read_list(lst):
    """(absolute path, label) per sample of a `PATH<TAB>LABEL` list (paths relative to the
    list's folder; blank lines and `#` comments skipped), as `imagefeed` reads it."""
    base = os.path.dirname(os.path.abspath(lst))
    items = []
    with open(lst, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            p, l = line.rsplit(None, 1)
            items.append((os.path.join(base, p), int(l)))
    return items
