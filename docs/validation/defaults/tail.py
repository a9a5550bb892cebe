# The lock-step tail of a corgipile epoch at K parts (VALIDATION.md, "At the defaults",
# breast_cancer K = 8): each part's length, and the class-1 share of the records the longer
# parts still give after the shortest part has ended, from `corgifs order` (the mount's plan).
# Run from the directory with data/ (sklearn_csv.py's output):
#   python3 tail.py SEED EPOCH K [DATASET]   (B: the binary, CACHE: the --cache-dir)
import os, subprocess, sys

seed, epoch, K = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ds = sys.argv[4] if len(sys.argv) > 4 else "breast_cancer"
src = "data/%s/train" % ds
parts = []
for p in range(K):
    out = subprocess.run(
        ["nice", "-n", "19", os.environ.get("B", "/tmp/corgifs-seeds"), "order", "--format", "csv",
         "--strategy", "corgipile", "--parts", str(K), "--part", str(p), "--epoch", str(epoch),
         "--seed", str(seed), "--cache-dir", os.environ.get("CACHE", "cache-v"), src],
        capture_output=True, text=True, check=True).stdout
    labels = []
    for line in out.splitlines():
        f, off, n = line.split()
        with open(os.path.join(src, f), "rb") as fh:
            fh.seek(int(off))
            labels.append(fh.read(int(n)).split(b",")[0].decode())
    parts.append(labels)
short = min(len(p) for p in parts)
tail = [l for p in parts for l in p[short:]]
every = [l for p in parts for l in p]
print("seed %d epoch %d: part lengths %s; records after the shortest part ends: %d, class-1 share %.2f (whole set %.2f)" % (
    seed, epoch, sorted(len(p) for p in parts), len(tail), tail.count("1") / max(1, len(tail)),
    every.count("1") / len(every)))
