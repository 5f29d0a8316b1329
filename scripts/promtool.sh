#!/usr/bin/env bash
# Fetches promtool, which `make test-rules` runs on prometheus/rules.yml,
# as Debian 12 "bookworm" builds it (the prometheus package, Prometheus
# 2.42), from the Debian archive that this machine's apt sources already
# use, as scripts/redis-servers.sh fetches the Redis servers:
#
# Usage: scripts/promtool.sh DEST
#
# Afterwards DEST/bin/promtool runs it. Nothing on the system changes and no
# root is needed (scripts/debian.sh says how). A promtool already in DEST is
# not fetched again, and one is moved into place only once it has run. About
# 30 MB of downloads the first time (the package index, then the package,
# most of which is the Prometheus server, dropped on unpacking); about 60 MB kept.
#
# PROMTOOL_ARCHIVE=URI overrides the archive (a Debian mirror); otherwise
# it is the one this machine's apt sources name for its own Debian release.
set -euo pipefail

tag=promtool archive_var=PROMTOOL_ARCHIVE
. "$(dirname "$0")/debian.sh"

[ $# -eq 1 ] || die "usage: $0 DEST"
mkdir -p "$1"
dest=$(cd "$1" && pwd)

ready() { [ -x "$dest/bin/promtool" ]; }
if ! ready; then
	debian_lock "$dest"
fi
if ! ready; then
	debian_start "$dest"
	debian_unpack bookworm prometheus "$work/root"
	# The package's Prometheus server and web pages are not needed.
	rm -rf "$work/root/usr/bin/prometheus" "$work/root/usr/share"
	debian_wrap "$work" promtool usr/bin/promtool "promtool from Debian bookworm (prometheus)"
	version=$("$work/bin/promtool" --version 2>&1 | head -n 1) || die "promtool --version failed: $version"
	grep -Eq '^promtool, version 2\.' <<<"$version" ||
		die "bookworm now has another promtool than expected: $version"
	# The wrapper last: its presence says the rest is in place.
	rm -rf "${dest:?}/root" "$dest/bin"
	mv "$work/root" "$dest/root"
	mv "$work/bin" "$dest/bin"
fi
echo "promtool: $dest/bin/promtool: $("$dest/bin/promtool" --version 2>&1 | head -n 1)"
