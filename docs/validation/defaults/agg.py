# Makes VALIDATION.md's table "At the defaults" from the validate --json files beside it
# (NAME-kK-sS.json): run from the repository's root, `python3 docs/validation/defaults/agg.py`.
# An argument names another directory of the same layout: `agg.py docs/validation/defaults/floor4k`
# gives the small sets' rows at the 4 KiB local floor of before, floor1k at a 1 KiB one.
#
# For every row it also gives the null of each criterion: the same statistic for `full` of
# seed s against `full` of seed s+1 (cyclically), two independent uniform shuffles trained
# alike. At the defaults every part is one buffer, so corgipile serves an exact uniform
# shuffle of each part: a corgipile − full gap inside the null's spread is the spread of
# SGD over orders, not a property of the order.
import collections, glob, itertools, json, re, statistics as st, sys

BASE = sys.argv[1] if len(sys.argv) > 1 else "docs/validation/defaults"

LABELS = {
    "fmnist": "Fashion-MNIST",
    "fmnist64m": "Fashion-MNIST, `--max-memory 64MiB`",
    "digits": "digits",
    "digitseq": "digits, `--equal-parts`",
    "breast_cancer": "breast_cancer",
    "breast_cancereq": "breast_cancer, `--equal-parts`",
}
ORDER = list(LABELS)

res = collections.defaultdict(dict)
for f in sorted(glob.glob(BASE + "/*.json")):
    m = re.match(r".*/(.+)-k(\d+)-s(\d+)\.json", f)
    ds, k, s = m.group(1), int(m.group(2)), int(m.group(3))
    r = json.load(open(f))
    res[(ds, k)][s] = {run["strategy"]: run for run in r["runs"]}


def ms(xs, fmt="%.2f"):
    return (fmt + " ± " + fmt) % (st.mean(xs), st.stdev(xs) if len(xs) > 1 else 0)


def size(v):
    if isinstance(v, int):
        for unit, b in (("MiB", 1 << 20), ("KiB", 1 << 10)):
            if v >= b and v % b == 0:
                return "%d %s" % (v // b, unit)
    return str(v)


def acc(run, e):
    return 100 * run["epochs"][e]["test_acc"]


print("| dataset | K | block, buffer (config.json) | corgipile final | full final "
      "| corgipile − full, seeds 1–5 | null: full(s) − full(s+1) | largest \\|gap\\|: corgipile, null "
      "| more than 0.5 below: corgipile − full, seeds; null, ordered pairs of full's seeds "
      "| worst epoch ≥ 1: corgipile − full (seed, epoch); null "
      "| full-set loss: corgipile, full, diff | records an epoch: corgipile, full |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for (ds, k) in sorted(res, key=lambda dk: (ORDER.index(dk[0]), dk[1])):
    seeds = res[(ds, k)]
    ss = sorted(seeds)
    nxt = dict(zip(ss, ss[1:] + ss[:1]))
    n = len(seeds[ss[0]]["full"]["epochs"])
    last = n - 1
    cfg = set()
    cf, ff, gaps, nulls, lc, lf, rc, rf = [], [], [], [], [], [], set(), set()
    worst, nullworst = (0, None), 0.0
    for s in ss:
        c, f = seeds[s]["corgipile"], seeds[s]["full"]
        mc = c.get("mount_config") or {}
        cfg.add("%s, %s" % (size(mc.get("block_size")), mc.get("buffer")))
        cf.append(acc(c, last))
        ff.append(acc(f, last))
        gaps.append(cf[-1] - ff[-1])
        nulls.append(acc(f, last) - acc(seeds[nxt[s]]["full"], last))
        for e in range(1, n):
            g = acc(c, e) - acc(f, e)
            if g < worst[0]:
                worst = (g, (s, e))
            nullworst = min(nullworst, acc(f, e) - acc(seeds[nxt[s]]["full"], e))
        lc.append(c["epochs"][last]["full_train_loss"])
        lf.append(f["epochs"][last]["full_train_loss"])
        rc.add(c["epochs"][last].get("records"))
        rf.add(f["epochs"][last].get("records"))
    # Every ordered pair of full's seeds: how often one full shuffle ends
    # more than 0.5 points (the target's threshold) below another.
    pairs = [a - b for a, b in itertools.permutations(ff, 2)]
    print("| %s | %d | %s | %s | %s | %s | %s | %.2f, %.2f | %d of %d; %d of %d | %+.2f (%s); %+.2f | %s, %s, %+.2f%% | %s, %s |" % (
        LABELS.get(ds, ds), k, " / ".join(sorted(cfg)), ms(cf), ms(ff),
        " ".join("%+.2f" % g for g in gaps), " ".join("%+.2f" % g for g in nulls),
        max(abs(g) for g in gaps), max(abs(g) for g in nulls),
        sum(g < -0.5 for g in gaps), len(gaps), sum(p < -0.5 for p in pairs), len(pairs),
        worst[0], "seed %d, epoch %d" % worst[1] if worst[1] else "-", nullworst,
        ms(lc, "%.4f"), ms(lf, "%.4f"), 100 * (st.mean(lc) / st.mean(lf) - 1),
        "–".join(str(x) for x in sorted({min(rc), max(rc)})), "–".join(str(x) for x in sorted({min(rf), max(rf)}))))

# Seeds 6–15 of a row (more/NAME-kK-sS.json, runval5.sh and runval6.sh) with its seeds 1–5: the
# spread of both final epochs over 15 seeds, and the null over every ordered pair of full's seeds.
more = collections.defaultdict(dict)
for f in sorted(glob.glob(BASE + "/more/*.json")):
    m = re.match(r".*/(.+)-k(\d+)-s(\d+)\.json", f)
    ds, k, s = m.group(1), int(m.group(2)), int(m.group(3))
    more[(ds, k)][s] = {run["strategy"]: run for run in json.load(open(f))["runs"]}
for (ds, k) in sorted(more, key=lambda dk: (ORDER.index(dk[0]), dk[1])):
    seeds = dict(res[(ds, k)])
    seeds.update(more[(ds, k)])
    ss = sorted(seeds)
    n = len(seeds[ss[0]]["full"]["epochs"])
    cf = [acc(seeds[s]["corgipile"], -1) for s in ss]
    ff = [acc(seeds[s]["full"], -1) for s in ss]
    gaps = [c - f for c, f in zip(cf, ff)]
    pairs = [a - b for a, b in itertools.permutations(ff, 2)]
    lc = [seeds[s]["corgipile"]["epochs"][-1]["full_train_loss"] for s in ss]
    lf = [seeds[s]["full"]["epochs"][-1]["full_train_loss"] for s in ss]
    worst = min((acc(seeds[s]["corgipile"], e) - acc(seeds[s]["full"], e), s, e) for s in ss for e in range(1, n))
    nullworst = min(acc(seeds[a]["full"], e) - acc(seeds[b]["full"], e) for a, b in itertools.permutations(ss, 2) for e in range(1, n))
    print()
    print("| %s, K = %d, seeds %d–%d | corgipile | full |" % (LABELS.get(ds, ds), k, ss[0], ss[-1]))
    print("|---|---|---|")
    print("| final test acc, mean ± sd | %s | %s |" % (ms(cf), ms(ff)))
    print("| final test acc, min – max | %.2f – %.2f | %.2f – %.2f |" % (min(cf), max(cf), min(ff), max(ff)))
    print("| corgipile − full per seed; full(s) − full(t), all ordered pairs | %s | %s |" % (
        " ".join("%+.2f" % g for g in gaps), "min %+.2f, max %+.2f" % (min(pairs), max(pairs))))
    print("| more than 0.5 below | %d of %d seeds | %d of %d ordered pairs |" % (
        sum(g < -0.5 for g in gaps), len(gaps), sum(p < -0.5 for p in pairs), len(pairs)))
    print("| worst epoch ≥ 1 below | %+.2f (seed %d, epoch %d) | %+.2f (any pair) |" % (worst[0], worst[1], worst[2], nullworst))
    print("| each seed's worst epoch ≥ 1 | %s | |" % " ".join(
        "%+.2f" % min(acc(seeds[s]["corgipile"], e) - acc(seeds[s]["full"], e) for e in range(1, n)) for s in ss))
    # The second target per seed: is some epoch ≥ 1 more than 1.5 points below? For the null,
    # the same over every ordered pair of full's seeds.
    deep = sum(min(acc(seeds[s]["corgipile"], e) - acc(seeds[s]["full"], e) for e in range(1, n)) < -1.5 for s in ss)
    nulldeep = sum(min(acc(seeds[a]["full"], e) - acc(seeds[b]["full"], e) for e in range(1, n)) < -1.5
                   for a, b in itertools.permutations(ss, 2))
    print("| an epoch ≥ 1 more than 1.5 below | %d of %d seeds | %d of %d ordered pairs |" % (deep, len(ss), nulldeep, len(pairs)))
    print("| full-set loss, mean ± sd | %s | %s (diff %+.2f%%) |" % (ms(lc, "%.4f"), ms(lf, "%.4f"), 100 * (st.mean(lc) / st.mean(lf) - 1)))
