#!/bin/sh
# build.sh builds $BIN/sanqos_VERSION_ARCH.deb (make deb): the daemon
# built anew with the package's version, staged by make install
# PREFIX=/usr with the unit where packages put units (/lib/systemd/system),
# Debian's docs (copyright, changelog.Debian.gz) and lintian overrides
# added, packed by dpkg-deb and checked by lintian (LINTIAN=no skips it).
# It prints the path of the package last. Reproducible: the build date is
# the commit's (SOURCE_DATE_EPOCH), paths are trimmed, file times clamped.
set -eu
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
GO=${GO:-go}
LINTIAN=${LINTIAN:-yes}
here=deploy/debian
version=${DEB_VERSION:-$("$here/version.sh")}
arch=$(dpkg --print-architecture)
maintainer=${DEB_MAINTAINER:-sanqos maintainers <maintainers@users.noreply.github.com>}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

work=$(mktemp -d "${TMPDIR:-/tmp}/sanqos-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
umask 022

# The binary reports the package's version (sanqos version); stripped,
# with no build paths in it.
GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath" make --no-print-directory install \
	BIN="$work/bin" GO="$GO" VERSION="${version%-*}" EXTRA_LDFLAGS="-s -w -buildid=" \
	DESTDIR="$root" PREFIX=/usr UNITDIR=/lib/systemd/system >/dev/null

doc=$root/usr/share/doc/sanqos
install -m 0644 "$here/copyright" "$doc/copyright"
{
	printf 'sanqos (%s) unstable; urgency=medium\n\n' "$version"
	printf '  * Built from commit %s of https://github.com/sanqos/sanqos\n' "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
	printf '    with make deb.\n\n'
	printf ' -- %s  %s\n' "$maintainer" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.Debian.gz"
gzip -9n "$root"/usr/share/man/man8/*.8
install -D -m 0644 "$here/lintian-overrides" "$root/usr/share/lintian/overrides/sanqos"

install -d -m 0755 "$root/DEBIAN"
for s in postinst prerm postrm; do install -m 0755 "$here/$s" "$root/DEBIAN/$s"; done
echo /etc/sanqos/sanqos.toml > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" -e "s|@SIZE@|$size|" \
	"$here/control.in" > "$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
find "$root" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

deb=$BIN/sanqos_${version}_$arch.deb
mkdir -p "$BIN"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
if [ "$LINTIAN" = yes ]; then
	# Warnings fail the build as errors do: each tag that stays has its
	# reason in lintian-overrides.
	lintian --fail-on error,warning --display-info "$deb" >&2
fi
echo "$deb"
