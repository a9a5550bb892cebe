# The K = 8 rows under each rule for the last steps of parts of unequal length (VALIDATION.md,
# "At the defaults", "How K workers end an epoch"): run from the repository's root.
#   join/drop/           the epoch ended at the shortest part's last full step (before issue 23's fix)
#   join/mean-records/   every part to its end, a step's update the mean over the records it got (fe70a65)
#   join/per-part-mean/  the same, the update the sum of the parts' means over K (35632e7)
#   . (the table's)      the same, every record of an uneven step weighing 1/Batch (the rule now)
import collections, glob, json, os, re, statistics as st

D = "docs/validation/defaults"
RULES = [("drop", "join/drop"), ("mean of the records", "join/mean-records"),
         ("sum of part means / K", "join/per-part-mean"), ("sum / Batch (now)", ".")]
NAMES = [("breast_cancer", "breast_cancer"), ("digits", "digits"), ("fmnist", "Fashion-MNIST"),
         ("fmnist64m", "Fashion-MNIST, `--max-memory 64MiB`")]

print("| dataset, K = 8 | rule | seeds | records an epoch: corgipile; full | corgipile − full, final test acc | full-set loss, corgipile vs full |")
print("|---|---|---|---|---|---|")
for ds, label in NAMES:
    for rule, sub in RULES:
        files = sorted(glob.glob(os.path.join(D, sub, "%s-k8-s*.json" % ds)))
        if not files:
            continue
        gaps, lc, lf, rc, rf, seeds = [], [], [], set(), set(), []
        for f in files:
            seeds.append(int(re.match(r".*-s(\d+)\.json", f).group(1)))
            runs = {r["strategy"]: r["epochs"] for r in json.load(open(f))["runs"]}
            c, fu = runs["corgipile"][-1], runs["full"][-1]
            gaps.append(100 * (c["test_acc"] - fu["test_acc"]))
            lc.append(c["full_train_loss"])
            lf.append(fu["full_train_loss"])
            rc.add(c["records"])
            rf.add(fu["records"])
        print("| %s | %s | %s | %s; %s | %s | %+.2f%% |" % (
            label, rule, ",".join(map(str, sorted(seeds))),
            "–".join(map(str, sorted({min(rc), max(rc)}))), "–".join(map(str, sorted({min(rf), max(rf)}))),
            " ".join("%+.2f" % g for g in gaps), 100 * (st.mean(lc) / st.mean(lf) - 1)))
