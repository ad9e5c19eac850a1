#!/bin/sh
# test-cycle.sh [--instdir DIR] DEB1 DEB2: install DEB1, change its
# configuration, upgrade to DEB2 (a later version), remove, purge, and
# check each step: the files, the conffile (an administrator's change is
# kept on the upgrade; a changed shipped one lands beside it as
# .dpkg-dist), the service enabled, nothing left after the purge.
#
# Without --instdir it acts on this machine's dpkg (a throwaway guest:
# the kernel lab's); where systemd runs it also checks that the service is
# enabled and started by the install, restarted by the upgrade, stopped by
# the removal. With --instdir it installs into DIR (empty or new) with its
# own dpkg database, the maintainer scripts run with DPKG_ROOT=DIR and
# start nothing, and the runtime dependencies are not asked for (the
# internal/lint test TestDebCycle runs it so).
# Exit status 0 when every check passed; each failure is printed.
set -eu

root=""
if [ "${1:-}" = --instdir ]; then
	root=$(realpath -m "$2")
	shift 2
fi
[ $# -eq 2 ] || { echo "usage: $0 [--instdir DIR] DEB1 DEB2" >&2; exit 2; }
deb1=$1 deb2=$2
v1=$(dpkg-deb -f "$deb1" Version)
v2=$(dpkg-deb -f "$deb2" Version)
dpkg --compare-versions "$v2" gt "$v1" || { echo "$deb2 ($v2) is not newer than $deb1 ($v1)" >&2; exit 2; }

set -- --force-confold --force-confdef
if [ -n "$root" ]; then
	mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
	touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
	set -- "$@" --instdir="$root" --admindir="$root/var/lib/dpkg" --force-script-chrootless --force-depends
fi
systemd=""
if [ -z "$root" ] && [ -d /run/systemd/system ]; then systemd=1; fi

failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }
step() { echo "== $*"; }
dpkg_() { DEBIAN_FRONTEND=noninteractive dpkg "$@" </dev/null; }
status() { dpkg-query ${root:+--admindir="$root/var/lib/dpkg"} -W -f='${db:Status-Abbrev}${Version}' sanqos 2>/dev/null || true; }
conf=$root/etc/sanqos/sanqos.toml
wants=$root/etc/systemd/system/multi-user.target.wants/sanqos.service

step "install $v1"
dpkg_ "$@" -i "$deb1"
[ "$(status)" = "ii $v1" ] || fail "after install: status $(status), want ii $v1"
for f in /usr/sbin/sanqos /lib/systemd/system/sanqos.service /etc/sanqos/sanqos.toml \
	/usr/share/man/man8/sanqos.8.gz /usr/share/bash-completion/completions/sanqos \
	/usr/share/doc/sanqos/examples/sanqos.example.toml; do
	[ -e "$root$f" ] || fail "after install: $f missing"
done
[ -L "$wants" ] || fail "after install: the service is not enabled ($wants)"
"$root/usr/sbin/sanqos" version | grep -q "^sanqos ${v1%-*}\$" || fail "sanqos version does not say ${v1%-*}"
if [ -n "$systemd" ]; then
	systemctl is-enabled --quiet sanqos || fail "after install: systemctl is-enabled sanqos: $(systemctl is-enabled sanqos)"
	systemctl is-active --quiet sanqos || fail "after install: sanqos is not active: $(systemctl is-active sanqos)"
	pid1=$(systemctl show -P MainPID sanqos)
fi

step "change the configuration, upgrade to $v2"
echo '# changed by the administrator' >> "$conf"
dpkg_ "$@" -i "$deb2"
[ "$(status)" = "ii $v2" ] || fail "after upgrade: status $(status), want ii $v2"
grep -q '^# changed by the administrator$' "$conf" || fail "after upgrade: the administrator's change to $conf is gone"
new=$(mktemp)
dpkg-deb --fsys-tarfile "$deb2" | tar -xO ./etc/sanqos/sanqos.toml > "$new"
old=$(mktemp)
dpkg-deb --fsys-tarfile "$deb1" | tar -xO ./etc/sanqos/sanqos.toml > "$old"
if ! cmp -s "$old" "$new"; then
	cmp -s "$new" "$conf.dpkg-dist" || fail "after upgrade: $v2's new configuration is not in $conf.dpkg-dist"
fi
rm -f "$old" "$new"
[ -L "$wants" ] || fail "after upgrade: the service is no longer enabled"
if [ -n "$systemd" ]; then
	systemctl is-active --quiet sanqos || fail "after upgrade: sanqos is not active"
	[ "$(systemctl show -P MainPID sanqos)" != "$pid1" ] || fail "after upgrade: sanqos was not restarted (MainPID $pid1)"
fi

step "remove"
dpkg_ "$@" -r sanqos
[ "$(status)" = "rc $v2" ] || fail "after remove: status $(status), want rc $v2"
[ ! -e "$root/usr/sbin/sanqos" ] || fail "after remove: /usr/sbin/sanqos is still there"
[ -e "$conf" ] || fail "after remove: $conf is gone (a removal keeps the configuration)"
if [ -n "$systemd" ]; then
	! systemctl is-active --quiet sanqos || fail "after remove: sanqos still runs"
fi

step "purge"
mkdir -p "$root/var/log/sanqos" && echo x > "$root/var/log/sanqos/record.jsonl"
dpkg_ "$@" -P sanqos
[ -z "$(status)" ] || [ "$(status)" = "un " ] || [ "$(status)" = "pn " ] || fail "after purge: status $(status)"
for d in /etc/sanqos /var/log/sanqos /run/sanqos-locks; do
	[ ! -e "$root$d" ] || fail "after purge: $d is still there"
done
[ ! -e "$wants" ] && [ ! -L "$wants" ] || fail "after purge: the enable link is still there"
if [ -n "$root" ]; then
	# Nothing but dpkg's own database and empty directories may remain.
	left=$(cd "$root" && find . ! -type d ! -path './var/lib/dpkg/*' | sort)
	[ -z "$left" ] || fail "after purge, left in $root: $left"
fi

if [ "$failed" = 0 ]; then echo "PASS: install $v1, upgrade to $v2 keeping the configuration, remove, purge"; fi
exit "$failed"
