#!/bin/bash
# The local block floor (VALIDATION.md, "The local block floor"): digits and breast_cancer,
# K = 1 and K = 8, seeds 1–15, with exactly runval6.sh's commands (it is called with SEEDS 1–15),
# and the --equal-parts rows of runval4.sh (K = 8, seeds 1–5), for a binary whose
# sizing.LocalFloor is the one tried. As they were made, from the repository's root:
#   go build -o /tmp/corgifs-floor ./cmd/corgifs               # LocalFloor = 512 (branch floor)
#   (and /tmp/corgifs-floor1k with LocalFloor = 1 << 10, /tmp/corgifs-floor4k on 0fc90b8)
#   python3 docs/validation/defaults/sklearn_csv.py /tmp/floor/data
#   mkdir -p /tmp/floor/check && ln -s /tmp/floor/data /tmp/floor/check/data
#   D=/tmp/floor/check B=/tmp/corgifs-floor bash docs/validation/defaults/runval7.sh
# Each floor has its own D, so its own index cache. The JSON goes to D/res/more/ (runval6.sh's
# layout, all 15 seeds) and D/res4/ (--equal-parts); seeds 1–5 were copied beside this script
# (floor1k/ for 1 KiB) and seeds 6–15 to more/. They were made with a binary of the same source
# (/tmp/corgifs-floor512); this script with the binary of the commit that set the floor to 512
# (6a4a125) re-made all 70 in /tmp/floor/check, equal in every field of every epoch but the
# seconds. A 4 KiB binary (0fc90b8) re-made seeds 1 and 9 of the four rows (floor4k/) so too.
here=$(cd "$(dirname "$0")" && pwd)
D=${D:?the directory with data/} B=${B:?the binary} R=res SEEDS="$(seq 1 15)" bash "$here/runval6.sh"
cd "$D"
mkdir -p res4
for ds in breast_cancer digits; do
  case $ds in
    digits) args="--data data/digits/train --test data/digits/test --format csv --batch 16";;
    breast_cancer) args="--data data/breast_cancer/train --test data/breast_cancer/test --format csv --batch 8";;
  esac
  for seed in 1 2 3 4 5; do
    name=${ds}eq-k8-s$seed
    [ -s res4/$name.json ] && continue
    nice -n 19 $B validate $args --workers 8 --seed $seed --equal-parts --model softmax --epochs 10 --lr 0.05 \
      --decay 0.95 --strategies corgipile,full --cache-dir $D/cache-v \
      --json res4/$name.json > res4/$name.out 2> res4/$name.err
    echo "$(date +%T) $name rc=$?" >> res4/progress
  done
done
