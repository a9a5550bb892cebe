#!/bin/bash
# Runs validate at the defaults (no --block-size, no --buffer): 5 seeds, K=1 and 8.
cd /tmp/dflt
B=/tmp/dflt/corgifs-v
mkdir -p res
for ds in digits breast_cancer fmnist; do
  case $ds in
    fmnist) args="--data data/fmnist/train --test data/fmnist/test --features image --batch 64";;
    digits) args="--data data/digits/train --test data/digits/test --format csv --batch 16";;
    breast_cancer) args="--data data/breast_cancer/train --test data/breast_cancer/test --format csv --batch 8";;
  esac
  for K in 1 8; do
    for seed in 1 2 3 4 5; do
      out=res/$ds-k$K-s$seed.json
      [ -s $out ] && continue
      nice -n 5 $B validate $args --model softmax --epochs 10 --lr 0.05 --decay 0.95 \
        --strategies corgipile,full --workers $K --seed $seed --cache-dir /tmp/dflt/cache-v \
        --json $out > res/$ds-k$K-s$seed.out 2> res/$ds-k$K-s$seed.err
      echo "$(date +%T) $ds K=$K seed=$seed rc=$?" >> res/progress
    done
  done
done
echo done >> res/progress
