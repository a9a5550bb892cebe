#!/bin/bash
# After runval5.sh: digits and breast_cancer, K = 1 and K = 8, at the defaults for seeds 6–15
# too, with exactly runval.sh's commands (the K = 8 ones as runval4.sh re-ran them), so that
# corgipile's and full's final epochs rest on 15 seeds each, as Fashion-MNIST K = 8's do.
# D is the directory with data/ (sklearn_csv.py's output), B the binary, R where the JSON goes
# (R/more/), SEEDS the seeds: SEEDS="1 2 3 4 5" R=check re-runs the table's seeds to show that
# the binary gives their JSON (all but the seconds). Each run takes about a second; they run one
# at a time, niced, since the machine is shared.
cd ${D:-/tmp/dflt}
B=${B:-/tmp/corgifs-seeds}
R=${R:-res6}
mkdir -p $R/more
for ds in digits breast_cancer; do
  case $ds in
    digits) args="--data data/digits/train --test data/digits/test --format csv --batch 16";;
    breast_cancer) args="--data data/breast_cancer/train --test data/breast_cancer/test --format csv --batch 8";;
  esac
  for K in 1 8; do
    for seed in ${SEEDS:-$(seq 6 15)}; do
      name=$ds-k$K-s$seed
      out=$R/more/$name.json
      [ -s $out ] && continue
      nice -n 19 $B validate $args --model softmax --epochs 10 --lr 0.05 --decay 0.95 \
        --strategies corgipile,full --workers $K --seed $seed --cache-dir ${D:-/tmp/dflt}/cache-v \
        --json $out > $R/more/$name.out 2> $R/more/$name.err
      echo "$(date +%T) more $name rc=$?" >> $R/progress
    done
  done
done
echo "more done $SEEDS" >> $R/progress
