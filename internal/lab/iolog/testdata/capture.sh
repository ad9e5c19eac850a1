#!/bin/sh
# Re-captures the fixtures from a real run of sanqos-iscsiload against a tgtd
# target. Usage (as root, inside the namespace that reaches the target):
#   capture.sh BINARY PORTAL TARGET
# The target's LUN 1 must hold at least 32 MiB.
set -eu
bin=$1 portal=$2 target=$3
cd "$(dirname "$0")"
"$bin" --portal "$portal" --target "$target" --job smalljob --size 4m --threads 2 \
	--runtime 3s --per-thread --quiet --io-log io.jsonl > smalljob.jsonl
head -n 40 io.jsonl > io.tmp && mv io.tmp io.jsonl
"$bin" --portal "$portal" --target "$target" --rw write --bs 64k --size 8m --threads 2 \
	--verify --quiet > verify.jsonl
"$bin" --portal "$portal" --target "$target" --job seqwrite-64k --size 8m --threads 2 \
	--on 2m --off 1s --runtime 3s --quiet > onoff.jsonl
