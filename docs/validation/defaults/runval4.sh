#!/bin/bash
# After the lock-step change (every record of an epoch trained on, as DDP's Join): re-runs
# every K = 8 row of runval.sh (with and without --equal-parts) and runval3.sh, seeds 1–5,
# with the same commands, and one K = 1 run to check that it is unchanged. B is the binary;
# ONLY=small,fmnist,fmnist64m picks the groups (two runs of the script can share the work).
cd /tmp/dflt
B=${B:-/tmp/corgifs-d23}
R=${R:-res4}
mkdir -p $R
run() { # name args...
  local name=$1; shift
  local out=$R/$name.json
  [ -s $out ] && return
  nice -n 5 $B validate "$@" --model softmax --epochs 10 --lr 0.05 --decay 0.95 \
    --strategies corgipile,full --cache-dir /tmp/dflt/cache-v \
    --json $out > $R/$name.out 2> $R/$name.err
  echo "$(date +%T) $name rc=$?" >> $R/progress
}
args() {
  case $1 in
    fmnist) echo "--data data/fmnist/train --test data/fmnist/test --features image --batch 64";;
    digits) echo "--data data/digits/train --test data/digits/test --format csv --batch 16";;
    breast_cancer) echo "--data data/breast_cancer/train --test data/breast_cancer/test --format csv --batch 8";;
  esac
}
ONLY=${ONLY:-small,fmnist,fmnist64m}
has() { [[ ",$ONLY," == *",$1,"* ]]; }
has small && run digits-k1-s2 $(args digits) --workers 1 --seed 2
has small && for ds in breast_cancer digits; do
  for seed in 1 2 3 4 5; do
    run $ds-k8-s$seed $(args $ds) --workers 8 --seed $seed
    run ${ds}eq-k8-s$seed $(args $ds) --workers 8 --seed $seed --equal-parts
  done
done
has fmnist && for seed in 1 2 3 4 5; do
  run fmnist-k8-s$seed $(args fmnist) --workers 8 --seed $seed
done
has fmnist64m && for seed in 1 2 3 4 5; do
  run fmnist64m-k8-s$seed $(args fmnist) --max-memory 64MiB --workers 8 --seed $seed
done
echo "done $ONLY" >> $R/progress
