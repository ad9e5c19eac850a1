#!/bin/bash
# capture.sh refreshes the tgtadm fixtures from a real tgtd (run as root).
# It starts tgtd on control port 2603 inside network namespaces of its own
# (prefix sanqos-dc-), defines three targets, holds sessions open with
# libiscsi's iscsi-perf from two initiator namespaces, and saves
# `tgtadm --op show` output. Everything it creates is removed on exit, and
# leftovers of an earlier crashed run are removed first.
# Usage: capture.sh OUTDIR
set -euo pipefail
out=${1:?usage: capture.sh OUTDIR}
out=$(cd "$out" && pwd)
port=2603
tgtpid=""

cleanup() {
	set +e
	jobs -p | xargs -r kill 2>/dev/null
	if [ -n "$tgtpid" ]; then
		tgtadm -C $port --op update --mode sys --name State -v offline >/dev/null 2>&1
		# tgtd ignores SIGTERM while targets exist: give it a moment, then KILL.
		kill "$tgtpid" 2>/dev/null
		for _ in $(seq 20); do kill -0 "$tgtpid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$tgtpid" 2>/dev/null
		wait "$tgtpid" 2>/dev/null
	fi
	for ns in sanqos-dc-t sanqos-dc-a sanqos-dc-b; do
		ip netns pids $ns 2>/dev/null | xargs -r kill 2>/dev/null
		ip netns del $ns 2>/dev/null
	done
	rm -rf "$work"
	rm -f /var/run/tgtd/socket.$port /var/run/tgtd/socket.$port.lock
}
# Leftovers of an earlier crashed run (our prefix only).
for ns in sanqos-dc-t sanqos-dc-a sanqos-dc-b; do
	ip netns pids $ns 2>/dev/null | xargs -r kill 2>/dev/null || true
	ip netns del $ns 2>/dev/null || true
done
rm -rf /tmp/sanqos-dc-capture.*/ 2>/dev/null || true
work=$(mktemp -d /tmp/sanqos-dc-capture.XXXXXX)
trap cleanup EXIT INT TERM

ip netns add sanqos-dc-t
ip -n sanqos-dc-t link set lo up
i=0
for side in a b; do
	i=$((i + 1))
	ip netns add sanqos-dc-$side
	ip -n sanqos-dc-$side link set lo up
	ip link add sanqos-dc-t$side netns sanqos-dc-t type veth peer name sanqos-dc-$side netns sanqos-dc-$side
	ip -n sanqos-dc-t addr add 10.206.$i.1/24 dev sanqos-dc-t$side
	ip -n sanqos-dc-$side addr add 10.206.$i.2/24 dev sanqos-dc-$side
	ip -n sanqos-dc-t link set sanqos-dc-t$side up
	ip -n sanqos-dc-$side link set sanqos-dc-$side up
done

for f in lun-a1 lun-a2 lun-idle lun-shared; do
	truncate -s 64M "$work/$f.img"
done

ip netns exec sanqos-dc-t tgtd -f -C $port >"$work/tgtd.log" 2>&1 &
tgtpid=$!
for _ in $(seq 50); do
	tgtadm -C $port --op show --mode sys >/dev/null 2>&1 && break
	sleep 0.1
done

t() { tgtadm -C $port --lld iscsi "$@"; }
# tid 1: two LUNs, one session.
t --op new --mode target --tid 1 -T iqn.2026-11.org.sanqos:two-luns
t --op new --mode logicalunit --tid 1 --lun 1 -b "$work/lun-a1.img"
t --op new --mode logicalunit --tid 1 --lun 2 -b "$work/lun-a2.img" --bstype aio
t --op bind --mode target --tid 1 -I ALL
# tid 2: no sessions, an ACL by address.
t --op new --mode target --tid 2 -T iqn.2026-11.org.sanqos:idle
t --op new --mode logicalunit --tid 2 --lun 1 -b "$work/lun-idle.img"
t --op bind --mode target --tid 2 -I 10.206.1.2
# tid 3: several sessions from different initiators and addresses.
t --op new --mode target --tid 3 -T iqn.2026-11.org.sanqos:shared
t --op new --mode logicalunit --tid 3 --lun 1 -b "$work/lun-shared.img"
t --op bind --mode target --tid 3 -I ALL

# Hold sessions open: slow, tiny I/O for longer than the capture takes.
# One at a time, so nexus numbers (and the fixture) are the same each run.
sessions=0
hold() { # ns initiator-iqn url
	ip netns exec "$1" iscsi-perf -i "$2" -m 1 -b 1 -t 60 "$3" >/dev/null 2>&1 &
	sessions=$((sessions + 1))
	for _ in $(seq 100); do
		n=$(t --op show --mode target | grep -c 'I_T nexus:' || true)
		[ "$n" -ge "$sessions" ] && return 0
		sleep 0.1
	done
	echo "session $sessions ($2 to $3) did not log in within 10 s" >&2
	exit 1
}
hold sanqos-dc-a iqn.2026-11.org.sanqos:init-a iscsi://10.206.1.1/iqn.2026-11.org.sanqos:two-luns/1
hold sanqos-dc-a iqn.2026-11.org.sanqos:init-a iscsi://10.206.1.1/iqn.2026-11.org.sanqos:shared/1
hold sanqos-dc-b iqn.2026-11.org.sanqos:init-b iscsi://10.206.2.1/iqn.2026-11.org.sanqos:shared/1
hold sanqos-dc-b iqn.2026-11.org.sanqos:init-b2 iscsi://10.206.2.1/iqn.2026-11.org.sanqos:shared/1
t --op show --mode target | sed "s#$work#/srv/sanqos#g" >"$out/show-target.txt"
echo "captured $(grep -c 'I_T nexus:' "$out/show-target.txt") sessions into $out" >&2
