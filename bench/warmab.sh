#!/bin/bash
# warmab.sh: warm epochs of several FUSE daemons over the same source files,
# alternated run by run in one sitting, so that a change of the machine's load
# hits every daemon alike (issue 25, the reader's side).
#
#   bench/warmab.sh [-r RUNS] [-k K] [-p] SRC NAME=DAEMON ... [NAME=loopback:BIN]
#
# Each NAME=DAEMON is a corgifs binary, mounted as
# `DAEMON mount SRC MNT --strategy corgipile --parts K --seed 1` (plus
# $CORGIFS_FLAGS); NAME=loopback:BIN mounts bench/loopback's binary BIN over
# SRC. With -p each corgifs daemon writes a CPU profile to WORK/NAME.pprof.
# After one untimed read of everything (the source files first, so that the
# page cache holds them), run r reads, with one `cat` per target, epoch r of
# every corgifs mount (all K parts) and every file of a loopback mount; the
# targets rotate so that none always follows the same one. A corgifs epoch's
# pages are dropped afterwards (POSIX_FADV_DONTNEED), as bench/bench.go does.
# Prints one line per run (MB/s, daemon CPU s/GiB, cat CPU s/GiB) and, per target, the median
# and min–max MB/s and the median ratio to the first target of each run,
# leaving out runs after which the source was no longer wholly resident.
# Work files go to $WORK (default /tmp/warmab).
set -euo pipefail
runs=5 k=1 prof=
while getopts r:k:p o; do
	case $o in
	r) runs=$OPTARG ;;
	k) k=$OPTARG ;;
	p) prof=1 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
src=$(realpath "$1")
shift
work=${WORK:-/tmp/warmab}
mkdir -p "$work"
names=() mnts=() pids=() kinds=() pin=
cleanup() {
	[[ -z $pin ]] || kill -TERM "$pin" 2>/dev/null || true
	for i in "${!pids[@]}"; do
		kill -TERM "${pids[$i]}" 2>/dev/null || true
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" 2>/dev/null || true
	done
}
trap cleanup EXIT
# Other tenants of a shared machine may drop the page cache (echo 3 >
# drop_caches) at any time; that spares pages someone has mapped, so a
# helper maps every source file and touches its pages for the whole run.
python3 -c 'import mmap, os, signal, sys
maps = []
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        if os.fstat(f.fileno()).st_size:
            m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            sum(m[i] for i in range(0, len(m), 4096))
            maps.append(m)
print("mapped", flush=True)
signal.pause()' "$src"/* >"$work/pin.log" 2>&1 &
pin=$!
until grep -q mapped "$work/pin.log" 2>/dev/null; do sleep 0.2; done
for spec in "$@"; do
	name=${spec%%=*} bin=${spec#*=}
	mnt=$work/mnt-$name
	mkdir -p "$mnt"
	if [[ $bin == loopback:* ]]; then
		"${bin#loopback:}" "$src" "$mnt" >"$work/$name.log" 2>&1 &
		kinds+=(loopback)
		ready=$mnt/$(ls "$src" | head -1)
	else
		extra=()
		[[ -n $prof ]] && extra=(--cpuprofile "$work/$name.pprof")
		# shellcheck disable=SC2086
		"$bin" mount "$src" "$mnt" --strategy corgipile --parts "$k" --seed 1 \
			--cache-dir "$work/cache" ${CORGIFS_FLAGS:-} "${extra[@]}" >"$work/$name.log" 2>&1 &
		kinds+=(corgifs)
		ready=$mnt/.corgifs/config.json
	fi
	pids+=($!) names+=("$name") mnts+=("$mnt")
	for _ in $(seq 600); do
		[[ -e $ready ]] && break
		sleep 0.5
	done
	[[ -e $ready ]] || { echo "$name did not mount" >&2; cat "$work/$name.log" >&2; exit 1; }
done

files() { # target index, epoch
	local m=${mnts[$1]}
	if [[ ${kinds[$1]} == loopback ]]; then
		ls -d "$m"/*
	else
		for ((p = 0; p < k; p++)); do
			printf '%s/epoch-%04d/part-%05d-of-%05d.tfrecord\n' "$m" "$2" "$p" "$k"
		done
	fi
}
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
drop() { python3 -c 'import os,sys
for p in sys.argv[1:]:
    fd=os.open(p,os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)' "$@"; }

cat "$src"/* >/dev/null
for i in "${!names[@]}"; do
	mapfile -t f < <(files "$i" 0)
	cat "${f[@]}" >/dev/null
	[[ ${kinds[$i]} == corgifs ]] && drop "${f[@]}"
done
bytes=$(du -cb "$src"/* | tail -1 | cut -f1)
echo "# $(date -u +%FT%TZ) src=$src bytes=$bytes K=$k runs=$runs load $(cut -d' ' -f1-3 /proc/loadavg)"
n=${#names[@]}
results=$work/results.txt
: >"$results"
for ((r = 1; r <= runs; r++)); do
	for ((j = 0; j < n; j++)); do
		i=$(((j + r - 1) % n))
		mapfile -t f < <(files "$i" "$r")
		# Other tenants may drop the page cache: warm the source again
		# before each timed read, and flag a run after which it is not
		# wholly resident.
		cat "$src"/* >/dev/null
		c0=$(cpu "${pids[$i]}")
		read -r secs rcpu < <(/usr/bin/time -f '%e %U %S' cat "${f[@]}" 2>&1 >/dev/null | awk '{print $1, $2+$3}')
		c1=$(cpu "${pids[$i]}")
		[[ ${kinds[$i]} == corgifs ]] && drop "${f[@]}"
		res=$(fincore -b -n -o RES "$src"/* | awk '{s += $1} END {print s}')
		cold=0
		((res < bytes)) && cold=1 && echo "# run $r ${names[$i]}: the source was dropped from the page cache ($res of $bytes bytes resident): left out"
		awk -v r="$r" -v name="${names[$i]}" -v b="$bytes" -v s="$secs" -v c="$((c1 - c0))" -v rc="$rcpu" -v cold="$cold" \
			'BEGIN { g = b/2^30; printf "%d %s %.0f %.2f %.2f %d\n", r, name, b/s/1e6, c/100/g, rc/g, cold }' | tee -a "$results"
	done
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$results" <<'PY'
import statistics, sys
mb, cpu, order = {}, {}, []
for line in open(sys.argv[1]):
    r, name, m, c, rc, cold = line.split()
    if name not in mb:
        order.append(name); mb[name], cpu[name] = {}, {}
    if cold == "0":
        mb[name][r], cpu[name][r] = float(m), (float(c), float(rc))
first = order[0]
print(f"{'target':12s} {'MB/s':>7s} {'min-max':>11s} {'daemon CPU s/GiB':>16s} {'cat CPU s/GiB':>13s} {'x '+first:>10s} {'min-max':>10s}")
for t in order:
    v = list(mb[t].values())
    rat = [mb[t][r] / mb[first][r] for r in mb[t] if r in mb[first]]
    if not v or not rat:
        print(f"{t:12s} no run with the source wholly in the page cache")
        continue
    print(f"{t:12s} {statistics.median(v):7.0f} {min(v):5.0f}-{max(v):<5.0f} {statistics.median(c[0] for c in cpu[t].values()):16.2f} {statistics.median(c[1] for c in cpu[t].values()):13.2f} "
          f"{statistics.median(rat):10.2f} {min(rat):.2f}-{max(rat):.2f}")
PY
