#!/bin/bash
# Measures the emulated disk with fio, as reported by helper H4b.
#
#   internal/diskemu/measure.sh ./sanqos overhead        # ram: FUSE path IOPS/MB/s, direct and via loop
#   internal/diskemu/measure.sh ./sanqos single PROFILE  # 8 KiB sync random reader on a loop device: r_await
#   internal/diskemu/measure.sh ./sanqos interference    # reader LUN vs 3 LUNs x 4 sequential 64 KiB writers
#
# Needs root, fio, losetup and a built sanqos (make build). Everything lives
# under /tmp/sanqos-emu-measure and is removed on exit.
set -euo pipefail
SANQOS=$(realpath "$1"); MODE=$2; PROFILE=${3:-thesis-2010}
D=/tmp/sanqos-emu-measure
PID=""
# ourloops lists the loop devices over files of our mount: attach runs in
# command substitutions (subshells), so a list kept in a variable would be
# lost; a crashed earlier run's loops are found the same way while its
# mount is still attached.
ourloops() {
	local f
	for f in /sys/block/loop*/loop/backing_file; do
		[ -e "$f" ] || continue
		case "$(cat "$f")" in "$D"/*) echo "/dev/$(basename "$(dirname "$(dirname "$f")")")" ;; esac
	done
}
cleanup() {
	for l in $(ourloops); do losetup -d "$l" 2>/dev/null || true; done
	sleep 0.5
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
	rm -rf "$D"
}
trap cleanup EXIT
cleanup
mkdir -p "$D/mnt" "$D/b"
[ "$MODE" = overhead ] && PROFILE=ram
[ "$MODE" = interference ] && PROFILE=${3:-thesis-2010}
"$SANQOS" lab diskemu --mount "$D/mnt" --backing "$D/b" --profile "$PROFILE" >"$D/log" 2>&1 &
PID=$!
for i in $(seq 50); do mountpoint -q "$D/mnt" && break; sleep 0.1; done
attach() { losetup --direct-io=on -f --show "$1"; }
fiojson() { # NAME TARGET ARGS...: prints one line per direction
	local name=$1 tgt=$2; shift 2
	fio --name="$name" --filename="$tgt" --direct=1 --time_based --runtime="${RT:-5}" --output-format=json "$@" >"$D/fio.json"
	python3 - "$D/fio.json" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
for d in ("read", "write"):
    x = j[d]
    if x["total_ios"]:
        print("  %-24s %-5s %8.0f IOPS %8.1f MB/s  clat %.3f ms" % (sys.argv[2], d, x["iops"], x["bw_bytes"] / 1e6, x["clat_ns"]["mean"] / 1e6))
PY
}
dstat() { awk -v d="$(basename "$1")" '$3==d{print $4, $7}' /proc/diskstats; }
rawait() { # DEV LABEL: r_await over the window since the last call's snapshot
	local r1 m1; read -r r1 m1 < <(dstat "$1")
	python3 -c "print('  %-24s %d reads, r_await %.3f ms (/proc/diskstats)' % ('$2', $r1-$R0, ($m1-$M0)/max(1, $r1-$R0)))"
}
case $MODE in
overhead)
	truncate -s 1G "$D/mnt/img"
	dd if=/dev/zero of="$D/mnt/img" bs=1M count=1024 oflag=direct conv=notrunc status=none
	L=$(attach "$D/mnt/img")
	echo "profile ram, FUSE file directly:"
	fiojson randread-8k-qd1 "$D/mnt/img" --ioengine=psync --rw=randread --bs=8k
	fiojson randread-8k-qd16 "$D/mnt/img" --ioengine=libaio --iodepth=16 --rw=randread --bs=8k
	fiojson seqread-1m "$D/mnt/img" --ioengine=psync --rw=read --bs=1m
	fiojson seqwrite-1m "$D/mnt/img" --ioengine=psync --rw=write --bs=1m
	echo "profile ram, via $L (direct I/O, dio=$(cat /sys/block/$(basename $L)/loop/dio)):"
	read -r R0 M0 < <(dstat "$L")
	fiojson randread-8k-qd1 "$L" --ioengine=psync --rw=randread --bs=8k
	rawait "$L" randread-8k-qd1
	fiojson randread-8k-qd16 "$L" --ioengine=libaio --iodepth=16 --rw=randread --bs=8k
	fiojson seqread-1m "$L" --ioengine=psync --rw=read --bs=1m
	fiojson seqwrite-1m "$L" --ioengine=psync --rw=write --bs=1m
	;;
single)
	truncate -s 2G "$D/mnt/img"
	L=$(attach "$D/mnt/img")
	echo "profile $PROFILE, 8 KiB sync random reader on $L (dio=$(cat /sys/block/$(basename $L)/loop/dio)):"
	read -r R0 M0 < <(dstat "$L")
	RT=10 fiojson randread-8k-qd1 "$L" --ioengine=psync --rw=randread --bs=8k
	rawait "$L" randread-8k-qd1
	;;
interference)
	for i in r w1 w2 w3; do truncate -s 2G "$D/mnt/$i.img"; done
	LR=$(attach "$D/mnt/r.img"); LW="$(attach "$D/mnt/w1.img") $(attach "$D/mnt/w2.img") $(attach "$D/mnt/w3.img")"
	echo "profile $PROFILE, reader (8 KiB random, 256 kB/s) on $LR; writers on $LW:"
	read -r R0 M0 < <(dstat "$LR")
	RT=10 fiojson reader-alone "$LR" --ioengine=psync --rw=randread --bs=8k --rate=256k
	rawait "$LR" reader-alone
	for w in $LW; do
		fio --name=w --filename="$w" --direct=1 --ioengine=psync --rw=write --bs=64k --numjobs=4 \
			--offset_increment=256m --size=256m --time_based --runtime=14 --group_reporting \
			--output-format=json >"$D/$(basename "$w").json" &
	done
	sleep 2
	read -r R0 M0 < <(dstat "$LR")
	RT=10 fiojson reader-with-writers "$LR" --ioengine=psync --rw=randread --bs=8k --rate=256k
	rawait "$LR" reader-with-writers
	wait $(jobs -p | grep -v "^$PID$") 2>/dev/null || true
	python3 - "$D" <<'PY'
import glob, json, sys
bw = sum(json.load(open(f))["jobs"][0]["write"]["bw_bytes"] for f in glob.glob(sys.argv[1] + "/loop*.json"))
print("  writers (12 threads, 3 LUNs) %.1f MB/s aggregate" % (bw / 1e6))
PY
	;;
*) echo "unknown mode $MODE: overhead, single PROFILE or interference" >&2; exit 2 ;;
esac
python3 -c "import json; s=json.load(open('$D/b/.sanqos-diskemu-stats.json')); print('  server stats:', {k: s[k] for k in ('reads','writes','max_in_flight','read_service_ms','read_latency_ms','write_service_ms','write_latency_ms','backing_ms')})"
