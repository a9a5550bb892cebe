#!/bin/bash
# probe_ab.sh alternates `corgifs index` runs of several binaries or modes
# against the MinIO copy that `go run ./bench --probe --work W --keep`
# left in W/records-SIZE/minio, the page cache dropped before each (root),
# and prints each run's time, the server's GETs, CPU and disk reads (its
# metrics and /proc), and corgifs's own blocks and requests lines.
#
#   bench/probe_ab.sh DIR RUNS LABEL:BINARY:MODE[:EXTRA ARGS] ...
#   bench/probe_ab.sh /tmp/probe10g/work/records-100KiB 3 before:/tmp/corgifs-old:probe after:/tmp/corgifs-new:probe
#
# With VGW_ROOT set, the server is versitygw serving that posix root
# (bucket bench, objects data/*, each with a user.etag xattr) instead:
# it has no metrics, so the GETs are corgifs's count alone.
set -u
D=$1 RUNS=$2
shift 2
PORT=${PORT:-39411}
export MINIO_ROOT_USER=corgifs-bench-access MINIO_ROOT_PASSWORD=corgifs-bench-secret-key MINIO_PROMETHEUS_AUTH_TYPE=public MINIO_BROWSER=off
if [ -n "${VGW_ROOT:-}" ]; then
	versitygw --port 127.0.0.1:$PORT --access $MINIO_ROOT_USER --secret $MINIO_ROOT_PASSWORD --quiet posix "$VGW_ROOT" > "$D/ab-vgw.log" 2>&1 &
else
	minio server "$D/minio" --address 127.0.0.1:$PORT --console-address 127.0.0.1:$((PORT + 1)) --quiet > "$D/ab-minio.log" 2>&1 &
fi
MPID=$!
trap 'kill $MPID' EXIT
until curl -s -o /dev/null http://127.0.0.1:$PORT/; do sleep 0.5; done
export AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD AWS_REGION=us-east-1 AWS_SESSION_TOKEN= AWS_ENDPOINT_URL=
# counters prints the server's GetObject count (absent before MinIO's
# first GET; MinIO caches its metrics for 10 s, so it waits 11 s first),
# CPU ticks and disk bytes read.
counters() {
	if [ -n "${VGW_ROOT:-}" ]; then
		echo -n "0 "
	else
		sleep 11
		echo -n "$(curl -s http://127.0.0.1:$PORT/minio/v2/metrics/node | awk '/^minio_s3_requests_total\{api="getobject"/{g = $2} END {print g + 0}') "
	fi
	echo "$(awk '{print $14+$15}' /proc/$MPID/stat)" "$(awk '/read_bytes/{print $2}' /proc/$MPID/io)"
}
for r in $(seq "$RUNS"); do
	for spec in "$@"; do
		IFS=: read -r label bin mode extra <<< "$spec"
		sync
		echo 3 > /proc/sys/vm/drop_caches
		cache=$(mktemp -d "$D/abcache-XXXX")
		read -r g0 c0 d0 <<< "$(counters)"
		t0=$(date +%s.%N)
		# shellcheck disable=SC2086 # extra holds several arguments
		$bin index s3://bench/data --s3-endpoint http://127.0.0.1:$PORT --cache-dir "$cache" --index "$mode" $extra > "$cache/out" 2> "$cache/err" || cat "$cache/err"
		t1=$(date +%s.%N)
		read -r g1 c1 d1 <<< "$(counters)"
		echo "run $r $label: $(echo "$t1 - $t0" | bc) s, server: $((g1 - g0)) GETs, $(echo "($c1 - $c0) / 100" | bc -l | cut -c1-5) CPU s, $(((d1 - d0) >> 20)) MiB from disk; corgifs: $(grep -E '^(blocks|requests)' "$cache/out" | tr -s ' \n' ' ')load $(cut -d' ' -f1 /proc/loadavg)"
		rm -rf "$cache"
	done
done
