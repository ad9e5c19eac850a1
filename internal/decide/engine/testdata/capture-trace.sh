#!/bin/sh
# capture-trace.sh SECONDS DEV... > FILE
#
# Records what the daemon observes each tick, for replay tests of the
# engine: every 100 ms the time (ns), the /proc/diskstats lines of the
# given devices and their reads/writes in flight from sysfs. Used to
# capture testdata/starvation.trace from the lab (sanqos lab run randw,
# uncontrolled run: the reader's reads take longer than a tick).
set -eu
secs=$1; shift
end=$(( $(date +%s) + secs ))
while [ "$(date +%s)" -lt "$end" ]; do
	echo "T $(date +%s%N)"
	for d in "$@"; do
		awk -v d="$d" '$3 == d { print "D " $0 }' /proc/diskstats
		echo "I $d $(cat /sys/class/block/"$d"/inflight)"
	done
	sleep 0.1
done
