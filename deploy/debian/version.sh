#!/bin/sh
# version.sh prints the Debian version of the package built from this
# checkout, from git describe, so that every commit gets a newer one:
#   tag v1.2.3 on HEAD            1.2.3-1
#   5 commits after v1.2.3        1.2.3+git20261128122052.abc1234-1
#   no tag yet                    0.0~git20261128122052.abc1234-1
# The commit time (UTC, to the second) orders commits of one day; a tag's
# "-rc1" becomes "~rc1" (before the release). Uncommitted changes append
# +dirty. The Debian revision -1 makes the package non-native (its
# changelog is changelog.Debian.gz).
set -eu
when=$(TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd)
hash=$(git rev-parse --short=7 HEAD)
if desc=$(git describe --tags --match 'v[0-9]*' --long 2>/dev/null); then
	rest=${desc%-g*}           # v1.2.3-rc1-5
	count=${rest##*-}          # 5
	tag=${rest%-*}             # v1.2.3-rc1
	upstream=$(printf '%s' "${tag#v}" | tr - '~')
	if [ "$count" != 0 ]; then
		upstream="$upstream+git$when.$hash"
	fi
else
	upstream="0.0~git$when.$hash"
fi
if ! git diff --quiet HEAD -- 2>/dev/null; then
	upstream="$upstream+dirty"
fi
echo "$upstream-1"
