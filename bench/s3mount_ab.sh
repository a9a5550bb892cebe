#!/bin/bash
# s3mount_ab.sh alternates cold first epochs of fresh mounts of several
# binaries or flag sets against the MinIO copy that
# `go run ./bench --s3speed --s3-server minio --work W --keep` left in
# W/records-SIZE/s3-speed/minio-root, the page cache dropped before each
# (root), and prints each run's MB/s of `cat` of part 0, the GETs and bytes
# stats.json counts under epoch 0, the chain walks' reads and bytes, the
# walked bytes kept and those epoch 0 used, and the daemon's and the server's CPU
# seconds.
#
#   bench/s3mount_ab.sh DIR RUNS LABEL:BINARY[:EXTRA MOUNT ARGS] ...
#   bench/s3mount_ab.sh /tmp/w/records-100KiB 3 main:/tmp/A one-get-a-run:/tmp/B 'main-4g:/tmp/A:--max-memory 4GiB'
set -u
D=$1 RUNS=$2
shift 2
PORT=${PORT:-39421}
export MINIO_ROOT_USER=corgifs-bench-access MINIO_ROOT_PASSWORD=corgifs-bench-secret-key MINIO_BROWSER=off MINIO_UPDATE=off
minio server "$D/s3-speed/minio-root" --address 127.0.0.1:$PORT --console-address 127.0.0.1:$((PORT + 1)) --quiet > "$D/ab-minio.log" 2>&1 &
MPID=$!
trap 'kill $MPID' EXIT
until curl -s -o /dev/null http://127.0.0.1:$PORT/; do sleep 0.5; done
export AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1 AWS_SESSION_TOKEN= AWS_ENDPOINT_URL=
bytes=$(du -sb "$D/src" | cut -f1)
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
for r in $(seq "$RUNS"); do
	for spec in "$@"; do
		IFS=: read -r label bin extra <<< "$spec"
		cache=$(mktemp -d "$D/abcache-XXXX")
		mnt="$cache/mnt"
		mkdir "$mnt"
		# A fresh mount, its index built first (not timed).
		# shellcheck disable=SC2086 # extra holds several arguments
		$bin mount --background s3://bench/data "$mnt" --seed 1 --cache-dir "$cache" --s3-endpoint http://127.0.0.1:$PORT $extra > "$cache/out" 2>&1 || { cat "$cache/out"; continue; }
		pid=$(grep -o 'daemon pid [0-9]*' "$cache/out" | awk '{print $3}')
		part=$(ls "$mnt"/epoch-0000/part-00000-of-*)
		sync
		echo 3 > /proc/sys/vm/drop_caches
		c0=$(ticks "$pid") s0=$(ticks $MPID)
		t0=$(date +%s.%N)
		cat "$part" > /dev/null
		t1=$(date +%s.%N)
		c1=$(ticks "$pid") s1=$(ticks $MPID)
		ep=$(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); e=s['epochs']['0']; print(e.get('source_gets',0), e['source_bytes'], 'walk', s.get('proof_reads',0), s.get('proof_bytes',0), 'kept', s.get('walk_kept_bytes',0), 'used', e.get('walked_bytes',0))" "$mnt/.corgifs/stats.json")
		buf=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c['buffer_bytes_per_part'])" "$mnt/.corgifs/config.json")
		# With --debug among the extra arguments, the log says how long
		# each buffer took to load: the GETs alone, without serving.
		took=$(grep -h 'msg="buffer loaded"' "$cache"/logs/*.log 2>/dev/null | grep -o 'took=[^ ]*' | tr '\n' ' ')
		echo "run $r $label: $(echo "$bytes / ($t1 - $t0) / 1000000" | bc) MB/s; epoch 0 GETs, bytes: $ep; buffer $buf; CPU s daemon $(echo "($c1 - $c0) / 100" | bc -l | cut -c1-5), server $(echo "($s1 - $s0) / 100" | bc -l | cut -c1-5); ${took:+loads $took; }load $(cut -d' ' -f1 /proc/loadavg)"
		$bin unmount "$mnt" > /dev/null 2>&1 || fusermount3 -u "$mnt"
		# The daemon's last log lines may land after the unmount.
		sleep 1
		rm -rf "$cache"
	done
done
