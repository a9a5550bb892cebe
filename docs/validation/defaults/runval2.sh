#!/bin/bash
# After runval.sh: Fashion-MNIST at the defaults under --max-memory 64MiB, where a
# buffer is not a whole part (about 254 blocks of 64 KiB, 4 buffers): the last-buffer effect.
cd /tmp/dflt
while ! grep -q done res/progress; do sleep 10; done
for seed in 1 2 3 4 5; do
  out=res/fmnist64m-k1-s$seed.json
  [ -s $out ] && continue
  nice -n 5 ./corgifs-v validate --data data/fmnist/train --test data/fmnist/test --features image --batch 64 \
    --model softmax --epochs 10 --lr 0.05 --decay 0.95 --strategies corgipile,full --max-memory 64MiB \
    --seed $seed --cache-dir /tmp/dflt/cache-v --json $out > res/fmnist64m-k1-s$seed.out 2> res/fmnist64m-k1-s$seed.err
  echo "$(date +%T) fmnist64m K=1 seed=$seed rc=$?" >> res/progress
done
echo done2 >> res/progress
