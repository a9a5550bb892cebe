"""What a mount says about itself, the part rule, and the `corgifs order` CLI."""

import json
import os
import shutil
import subprocess

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
    states (CSV header, fixed record size) are used unless given."""
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
    keep = {"csv": ("header",), "fixed": ("record_size", "header_bytes")}.get(name, ())
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


def order(src_or_mount, epoch=0, part=0, parts=None, binary=None, output="file", **flags):
    """The records of one part in the order a mount serves them, from the
    `corgifs order` command (on PATH, or `binary`).

    Given a mount, the order is that of its config.json (source, seed,
    strategy, block size, buffer, memory, equal parts, parts); given a
    source directory, pass seed= and the other flags as keywords
    (block_size="64KiB" becomes --block-size 64KiB; True gives a bare
    flag). Returns, for output="file", a list of (file relative to the
    source, offset, length) of each TFRecord frame in the source; for
    output="dali", a list of (offset, size) of each frame in the served
    part, DALI's TFRecord index."""
    binary = binary or shutil.which("corgifs")
    if not binary:
        raise FileNotFoundError("no corgifs command on PATH; pass binary=")
    cfg = _config_or_none(src_or_mount)
    src = os.fspath(src_or_mount)
    opts = {}
    if cfg is not None:
        src = cfg["source"]
        opts = {"seed": cfg.get("seed"), "strategy": cfg.get("strategy"), "block_size": cfg.get("block_size"),
                "buffer": cfg.get("buffer"), "max_memory": cfg.get("max_memory"),
                "equal_parts": cfg.get("equal_parts")}
        if parts is None:
            parts = cfg.get("parts")
    opts.update(flags)
    args = [binary, "order", "--epoch", str(epoch), "--part", str(part), "--parts", str(parts or 1),
            "--format", output]
    for k, v in opts.items():
        if v is None or v is False:
            continue
        name = "--" + k.replace("_", "-")
        args += [name] if v is True else [name, str(v)]
    args.append(src)
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    out = []
    for line in p.stdout.splitlines():
        f = line.split()
        if not f:
            continue
        if output == "dali":
            out.append((int(f[0]), int(f[1])))
        else:
            out.append((" ".join(f[:-2]), int(f[-2]), int(f[-1])))
    return out


