"""What a mount says about itself, the part rule, and the `corgifs order` CLI."""

import json
import os
import subprocess

from .daemon import binary as _binary
from .formats import canonical, reader

__all__ = ["config", "part_name", "part_path", "order", "reader_of"]


def config(mount):
    """The mount's .corgifs/config.json as a dict (parameters, seed, dataset
    summary)."""
    path = os.path.join(os.fspath(mount), ".corgifs", "config.json")
    with open(path) as f:
        return json.load(f)


def _config_or_none(mount):
    try:
        return config(mount)
    except FileNotFoundError:
        return None


def reader_of(mount, format=None, verify=True, **options):
    """The Reader of the parts a mount serves: the format given, else the
    one its config.json names, else TFRecord. Format options the config
    states (CSV header, fixed record size) are used unless given; chunk=
    sets the bytes read at a time."""
    cfg = _config_or_none(mount) or {}
    name = format or cfg.get("format") or "tfrecord"
    if isinstance(name, dict):  # {"name": ..., options...}
        cfg = {**cfg, **name}
        name = name.get("name", "tfrecord")
    for key in ("header", "record_size", "header_bytes"):
        if key in cfg and key not in options:
            options[key] = cfg[key]
    # Options a format does not take (a CSV header for a TFRecord mount)
    # are dropped rather than refused: they may come from the config.
    name = canonical(name)
    keep = ("chunk",) + {"csv": ("header",), "fixed": ("record_size", "header_bytes")}.get(name, ())
    r = reader(name, verify=verify, **{k: v for k, v in options.items() if k in keep})
    ext = cfg.get("extension") or cfg.get("ext")
    if ext and not format:
        r.ext = ext if ext.startswith(".") else "." + ext
    return r


def part_name(epoch, part, parts, ext=".tfrecord"):
    """epoch-EEEE/part-IIIII-of-KKKKK<ext>"""
    if not 0 <= part < parts:
        raise ValueError(f"part {part} of {parts}: out of range")
    return f"epoch-{epoch:04d}/part-{part:05d}-of-{parts:05d}{ext}"


def part_path(mount, epoch, rank, world, worker, workers, ext=".tfrecord"):
    """The part that DataLoader worker `worker` (of `workers`) of rank `rank`
    (of `world`) reads in `epoch`: part rank*workers + worker of
    K = world*workers."""
    if not (0 <= rank < world and 0 <= worker < workers):
        raise ValueError(f"rank {rank} of {world}, worker {worker} of {workers}: out of range")
    return os.path.join(os.fspath(mount), part_name(epoch, rank * workers + worker, world * workers, ext))


def _order_flags(cfg):
    """The `corgifs order` flags that reproduce the order of the mount whose
    config.json is cfg: the order parameters and the data format's flags
    (the format's options change the index, so the records and blocks)."""
    opts = {"seed": cfg.get("seed"), "strategy": cfg.get("strategy"), "block_size": cfg.get("block_size"),
            "buffer": cfg.get("buffer"), "max_memory": cfg.get("max_memory"),
            "equal_parts": cfg.get("equal_parts")}
    fmt = cfg.get("format")
    if isinstance(fmt, dict):
        cfg = {**cfg, **fmt}
        fmt = fmt.get("name")
    if fmt:
        opts["format"] = fmt
    if fmt == "csv" and "header" in cfg:
        opts["header"] = bool(cfg["header"])
    if fmt == "fixed":
        opts["record_size"] = cfg.get("record_size")
        # config's header_bytes is that of the served parts (none); the
        # sources' header is source_header_bytes.
        opts["header_bytes"] = cfg.get("source_header_bytes", 0)
    include = cfg.get("include")
    if include:
        opts["include"] = include if isinstance(include, str) else ",".join(include)
    skipped = (cfg.get("dataset") or {}).get("skipped_corrupt") or {}
    if skipped.get("count"):
        opts["skip_corrupt"] = True
    return opts


def order(src_or_mount, epoch=0, part=0, parts=None, binary=None, output="file", **flags):
    """The records of one part in the order a mount serves them, from the
    `corgifs order` command (`binary`, else as corgifs.binary() finds it).

    Given a mount, the order is that of its config.json: source, seed,
    strategy, block size, buffer, memory, equal parts, parts, and the data
    format with its options (CSV header, fixed record size and source
    header bytes, include globs when recorded). Given a source directory,
    pass seed= and the other flags as keywords (block_size="64KiB" becomes
    --block-size=64KiB, format="csv" --format=csv, header=False
    --header=false). Keywords override the config's values. Returns, for
    output="file", a list of (file relative to the source, offset, length)
    of each record's bytes in the source (a TFRecord frame, a line with its
    line end, a CSV row, a tar sample with its headers, an array row); for
    output="dali" (TFRecord only), a list of (offset, size) of each frame in
    the served part, DALI's TFRecord index."""
    binary = binary or _binary()
    cfg = _config_or_none(src_or_mount)
    src = os.fspath(src_or_mount)
    opts = {}
    if cfg is not None:
        src = cfg["source"]
        opts = _order_flags(cfg)
        if parts is None:
            parts = cfg.get("parts")
    opts.update(flags)
    args = [binary, "order", "--epoch", str(epoch), "--part", str(part), "--parts", str(parts or 1),
            "--output", output]
    for k, v in opts.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        # One argument each, so that a boolean flag takes its value.
        args.append(f"--{k.replace('_', '-')}={v}")
    args.append(src)
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    out = []
    for line in p.stdout.splitlines():
        if not line.strip():
            continue
        if output == "dali":
            off, size = line.split()
            out.append((int(off), int(size)))
        else:
            name, off, n = line.rsplit(" ", 2)  # a file name may hold spaces
            out.append((name, int(off), int(n)))
    return out
