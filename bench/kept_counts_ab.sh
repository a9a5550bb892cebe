#!/bin/bash
# kept_counts_ab.sh times the first epoch (part 0 of 1, read in 1 MiB pieces) of
# mounts of the MinIO copy that `go run ./bench --s3speed --s3-server minio
# --keep --work W` left in W/records-SIZE/s3-speed/minio-root, alternated,
# the page cache dropped before each epoch (root), at the defaults:
#   fresh    an empty --cache-dir: probe, walk the record chains, learn
#            the counts, each buffer loaded whole before it is served;
#   nocounts a remount with fresh's cache dir but its kept counts removed
#            (the index sidecar and the chain proofs kept: what a remount
#            was before the counts were kept);
#   kept     a remount with fresh's cache dir whole: the counts known, the
#            buffers served while they load.
#   full     --index full, its index built once before the runs (as a
#            reference: every count known, no walk).
# It prints each epoch's MB/s, the time to its first MiB, and stats.json's
# buffers_served_loading and proof_reads.
#
#   bench/kept_counts_ab.sh W/records-100KiB/s3-speed RUNS [BINARY]
set -u
D=$1 RUNS=$2 BIN=${3:-corgifs}
PORT=${PORT:-39511}
export MINIO_ROOT_USER=corgifs-bench-access MINIO_ROOT_PASSWORD=corgifs-bench-secret-key MINIO_BROWSER=off MINIO_UPDATE=off
minio server "$D/minio-root" --address 127.0.0.1:$PORT --console-address 127.0.0.1:$((PORT + 1)) --quiet > "$D/ab-counts-minio.log" 2>&1 &
MPID=$!
W=$(mktemp -d "$D/ab-counts-XXXX")
trap 'kill $MPID; rm -rf "$W"' EXIT
until curl -s -o /dev/null http://127.0.0.1:$PORT/; do sleep 0.5; done
export AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1 AWS_SESSION_TOKEN= AWS_ENDPOINT_URL=
# epoch LABEL CACHE mounts with CACHE, reads epoch 0 cold and unmounts.
epoch() {
	local mnt=$W/mnt-$1
	mkdir -p "$mnt"
	# shellcheck disable=SC2086 # EXTRA holds several arguments
	"$BIN" mount --background s3://bench/data "$mnt" --seed 1 --cache-dir "$2" --s3-endpoint http://127.0.0.1:$PORT ${EXTRA:-} > "$W/$1.out" 2>&1 || { cat "$W/$1.out"; exit 1; }
	local part=$mnt/epoch-0000/part-00000-of-00001.tfrecord
	local bytes
	bytes=$(stat -c %s "$part")
	sync
	echo 3 > /proc/sys/vm/drop_caches
	# Read in 1 MiB pieces: the time to the first MiB (what a reader
	# waits before its first batch) and to the end of the epoch.
	local t
	t=$(python3 -c '
import sys, time
buf = memoryview(bytearray(1 << 20))
with open(sys.argv[1], "rb", buffering=0) as f:
    t0 = time.monotonic()
    n = f.readinto(buf)
    first = time.monotonic() - t0
    while n:
        n = f.readinto(buf)
    print(first, time.monotonic() - t0)' "$part")
	local first secs
	read -r first secs <<< "$t"
	local st
	st=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("buffers_served_loading", s.get("buffers_served_loading", 0), "proof_reads", s.get("proof_reads", 0))' "$mnt/.corgifs/stats.json")
	"$BIN" unmount "$mnt" > /dev/null 2>&1
	# The daemon writes the kept counts as it exits: wait for it.
	local pid
	pid=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' "$W/$1.out")
	while [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null; do sleep 0.1; done
	echo "$1: $(echo "$bytes / $secs / 1000000" | bc) MB/s ($bytes bytes in ${secs:0:6} s, the first MiB in ${first:0:6} s), $st, load $(cut -d' ' -f1 /proc/loadavg)"
}
EXTRA="--index full" epoch full-index-build "$W/full" > /dev/null
for r in $(seq "$RUNS"); do
	fresh=$W/cache-$r
	echo "run $r"
	epoch fresh "$fresh"
	nocounts=$W/nocounts-$r
	cp -a "$fresh" "$nocounts"
	rm -f "$nocounts"/*.probe-counts
	epoch nocounts "$nocounts"
	epoch kept "$fresh"
	EXTRA="--index full" epoch full "$W/full"
done
