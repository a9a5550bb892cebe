#!/bin/bash
# After runval4.sh: Fashion-MNIST K = 8 at the defaults for seeds 6–15 too (the same command),
# so that the spread of corgipile's and of full's final epoch rest on 15 seeds each. SEEDS picks
# the seeds (two runs of the script can share them); it starts when runval4.sh's runs are done.
cd /tmp/dflt
B=${B:-/tmp/corgifs-d23}
R=${R:-res5}
while [ "$(grep -c '^done' $R/progress 2>/dev/null)" -lt "${WAIT:-1}" ]; do sleep 10; done
mkdir -p $R/more
for seed in ${SEEDS:-$(seq 6 15)}; do
  out=$R/more/fmnist-k8-s$seed.json
  [ -s $out ] && continue
  nice -n 5 $B validate --data data/fmnist/train --test data/fmnist/test --features image --batch 64 --workers 8 --seed $seed \
    --model softmax --epochs 10 --lr 0.05 --decay 0.95 --strategies corgipile,full --cache-dir /tmp/dflt/cache-v \
    --json $out > $R/more/fmnist-k8-s$seed.out 2> $R/more/fmnist-k8-s$seed.err
  echo "$(date +%T) more fmnist-k8-s$seed rc=$?" >> $R/progress
done
echo "more done $SEEDS" >> $R/progress
