#!/bin/bash
# Fashion-MNIST, K=8 lock-step workers at the defaults under --max-memory 64MiB: the parts do not
# all fit, so each gets a 1/K share of the buffer room (the final rule).
cd /tmp/dflt
for seed in 1 2 3 4 5; do
  out=res/fmnist64m-k8-s$seed.json
  [ -s $out ] && continue
  nice -n 5 ./corgifs-v2 validate --data data/fmnist/train --test data/fmnist/test --features image --batch 64 \
    --model softmax --epochs 10 --lr 0.05 --decay 0.95 --strategies corgipile,full --max-memory 64MiB --workers 8 \
    --seed $seed --cache-dir /tmp/dflt/cache-v --json $out > res/fmnist64m-k8-s$seed.out 2> res/fmnist64m-k8-s$seed.err
  echo "$(date +%T) fmnist64m K=8 seed=$seed rc=$?" >> res/progress
done
echo done3 >> res/progress
