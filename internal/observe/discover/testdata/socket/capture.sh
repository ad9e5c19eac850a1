#!/bin/sh
# capture.sh NETNS PID OUT: copies what the socket adapter reads of a real
# system into a fixture /proc tree at OUT: the socket table of network
# namespace NETNS (/proc/self/net/tcp, tcp6), this shell's mount
# namespace link and, of the listening process PID, comm, cmdline,
# mountinfo, its mount namespace link, the fd links and fdinfo.
set -eu
ns=$1 pid=$2 out=$3
mkdir -p "$out/self/net" "$out/$pid/fd" "$out/$pid/fdinfo"
ip netns exec "$ns" cat /proc/self/net/tcp > "$out/self/net/tcp"
ip netns exec "$ns" cat /proc/self/net/tcp6 > "$out/self/net/tcp6"
cp "/proc/$pid/comm" "/proc/$pid/cmdline" "/proc/$pid/mountinfo" "$out/$pid/"
mkdir -p "$out/self/ns" "$out/$pid/ns"
ln -sfn "$(readlink /proc/self/ns/mnt)" "$out/self/ns/mnt"
ln -sfn "$(readlink "/proc/$pid/ns/mnt")" "$out/$pid/ns/mnt"
for fd in /proc/"$pid"/fd/*; do
	n=$(basename "$fd")
	ln -sfn "$(readlink "$fd")" "$out/$pid/fd/$n"
	cp "/proc/$pid/fdinfo/$n" "$out/$pid/fdinfo/$n"
done
