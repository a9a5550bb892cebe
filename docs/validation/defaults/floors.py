# Compares the local block floors on the small sets over seeds 1–15 (VALIDATION.md, "The local
# block floor"): the JSON at 4 KiB (floor4k/, the floor before), 1 KiB (floor1k/) and 512 bytes
# (this directory, the floor now), each NAME-kK-sS.json with seeds 6–15 in more/. Run from the
# repository's root: `python3 docs/validation/defaults/floors.py`. full's runs do not depend on
# the block size (the same JSON at every floor), so the null columns are those of every floor.
import collections, glob, itertools, json, re, statistics as st

D = "docs/validation/defaults"
FLOORS = [("4 KiB", D + "/floor4k"), ("1 KiB", D + "/floor1k"), ("512 B", D)]


def load(base):
    res = collections.defaultdict(dict)
    for f in glob.glob(base + "/*.json") + glob.glob(base + "/more/*.json"):
        m = re.match(r".*/(digits|breast_cancer)-k(\d+)-s(\d+)\.json", f)
        if m:
            r = json.load(open(f))
            res[(m.group(1), int(m.group(2)))][int(m.group(3))] = {run["strategy"]: run for run in r["runs"]}
    return res


def acc(run, e):
    return 100 * run["epochs"][e]["test_acc"]


def size(v):
    return "%d KiB" % (v >> 10) if v >= 1024 else "%d B" % v


print("| dataset, K | floor | block (blocks a part) | corgipile − full, final: mean; below, level, above "
      "| more than 0.5 below (null: pairs) | an epoch ≥ 1 more than 1.5 below (null: pairs) "
      "| worst epoch ≥ 1 (seed, epoch); null | seeds whose worst epoch is below the null's "
      "| full-set loss vs full |")
print("|---|---|---|---|---|---|---|---|---|")
runs = [(name, load(base)) for name, base in FLOORS]
for key in [("digits", 1), ("digits", 8), ("breast_cancer", 1), ("breast_cancer", 8)]:
    for name, res in runs:
        seeds = res[key]
        ss = sorted(seeds)
        n = len(seeds[ss[0]]["full"]["epochs"])
        mc = seeds[ss[0]]["corgipile"]["mount_config"]
        gaps = [acc(seeds[s]["corgipile"], -1) - acc(seeds[s]["full"], -1) for s in ss]
        ff = [acc(seeds[s]["full"], -1) for s in ss]
        pairs = [a - b for a, b in itertools.permutations(ff, 2)]
        worst = {s: min((acc(seeds[s]["corgipile"], e) - acc(seeds[s]["full"], e), e) for e in range(1, n)) for s in ss}
        pw = {(a, b): min(acc(seeds[a]["full"], e) - acc(seeds[b]["full"], e) for e in range(1, n))
              for a, b in itertools.permutations(ss, 2)}
        nullworst = min(pw.values())
        w, ws = min((worst[s][0], s) for s in ss)
        lc = st.mean(seeds[s]["corgipile"]["epochs"][-1]["full_train_loss"] for s in ss)
        lf = st.mean(seeds[s]["full"]["epochs"][-1]["full_train_loss"] for s in ss)
        print("| %s, K = %d | %s | %s (%d) | %+.2f; %d, %d, %d | %d of %d (%d of %d) | %d of %d (%d of %d) | %+.2f (%d, %d); %+.2f | %s | %+.2f%% |" % (
            key[0], key[1], name, size(mc["block_size"]), mc["sizing"]["blocks_per_buffer"],
            st.mean(gaps), sum(g < -1e-9 for g in gaps), sum(abs(g) < 1e-9 for g in gaps), sum(g > 1e-9 for g in gaps),
            sum(g < -0.5 for g in gaps), len(ss), sum(p < -0.5 for p in pairs), len(pairs),
            sum(worst[s][0] < -1.5 for s in ss), len(ss), sum(v < -1.5 for v in pw.values()), len(pw),
            w, ws, worst[ws][1], nullworst,
            " ".join("%+.2f (%d)" % (worst[s][0], s) for s in ss if worst[s][0] < nullworst - 1e-9) or "none",
            100 * (lc / lf - 1)))
