#!/usr/bin/env bash
# Fetches the Redis-compatible servers that the test suite runs on, as
# Debian builds them, from the Debian archive that this machine's apt
# sources already use:
#
#   redis6    Redis 6.0    Debian 11 "bullseye"   no PEXPIRE ... NX, no ADDSLOTSRANGE
#   redis7    Redis 7.0    Debian 12 "bookworm"
#   redis8    Redis 8.0    Debian 13 "trixie"
#   valkey8   Valkey 8.1   Debian 13 "trixie"
#
# Usage: scripts/redis-servers.sh DEST [name...]    (default: all four)
#
# Afterwards DEST/<name>/bin holds redis-server and redis-cli, so that
#   PATH=DEST/redis6/bin:$PATH go test ./...
# runs every test that starts "redis-server" on that server.
#
# Nothing on the system changes and no root is needed (scripts/debian.sh,
# which scripts/promtool.sh shares, says how): each server runs on the C
# library and the other libraries of its own Debian release, through that
# release's dynamic loader. A name already in DEST is not fetched again; a
# name is moved into place only once its server has started, so an
# interrupted run leaves nothing half done. About 25 MB of downloads per
# Debian release the first time (its package index, then the packages).
#
# REDIS_SERVERS_ARCHIVE=URI overrides the archive (a Debian mirror);
# otherwise it is the one this machine's apt sources name for its own
# Debian release.
set -euo pipefail

all=(redis6 redis7 redis8 valkey8)

tag=redis-servers archive_var=REDIS_SERVERS_ARCHIVE
. "$(dirname "$0")/debian.sh"

[ $# -ge 1 ] || die "usage: $0 DEST [${all[*]}]"
mkdir -p "$1"
dest=$(cd "$1" && pwd)
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")

# What each name is: its Debian release, the package holding the server,
# the program's prefix in that package, and the first line its --version
# must print.
suite_of() {
	case $1 in
	redis6) echo bullseye ;;
	redis7) echo bookworm ;;
	redis8 | valkey8) echo trixie ;;
	esac
}
package_of() { if [ "$1" = valkey8 ]; then echo valkey-tools; else echo redis-tools; fi; }
program_of() { if [ "$1" = valkey8 ]; then echo valkey; else echo redis; fi; }
version_pattern_of() {
	case $1 in
	redis6) echo '^Redis server v=6\.0\.' ;;
	redis7) echo '^Redis server v=7\.' ;;
	redis8) echo '^Redis server v=8\.0\.' ;;
	valkey8) echo '^Valkey server v=8\.1\.' ;;
	esac
}

for name in "${names[@]}"; do
	[ -n "$(suite_of "$name")" ] || die "unknown server $name; known: ${all[*]}"
done

ready() { [ -x "$dest/$1/bin/redis-server" ] && [ -x "$dest/$1/bin/redis-cli" ]; }

missing() {
	local name
	for name in "${names[@]}"; do
		ready "$name" || echo "$name"
	done
}

todo=$(missing)
if [ -z "$todo" ]; then
	echo "redis-servers: ${names[*]} already in $dest"
	exit 0
fi

debian_lock "$dest"
todo=$(missing)
[ -n "$todo" ] || {
	echo "redis-servers: ${names[*]} already in $dest"
	exit 0
}
debian_start "$dest"

# build NAME: the server's packages unpacked in $work/NAME/root, its
# wrappers in $work/NAME/bin.
build() {
	local name=$1 suite package program out
	suite=$(suite_of "$name") package=$(package_of "$name") program=$(program_of "$name")
	out=$work/$name
	debian_unpack "$suite" "$package" "$out/root"

	# In Debian the server is the same binary as redis-check-rdb (or
	# valkey-check-rdb), which picks its role from the name it was run by.
	[ -x "$out/root/usr/bin/$program-check-rdb" ] || die "$name: $package has no /usr/bin/$program-check-rdb"
	ln -sf "$program-check-rdb" "$out/root/usr/bin/$program-server"
	local role
	for role in server cli; do
		debian_wrap "$out" "redis-$role" "usr/bin/$program-$role" "$name: $program-$role from Debian $suite ($package)"
	done

	local version
	version=$("$out/bin/redis-server" --version) || die "$name: redis-server --version failed"
	grep -Eq "$(version_pattern_of "$name")" <<<"$version" ||
		die "$name: $suite now has another server than expected: $version"
	"$out/bin/redis-cli" --version >/dev/null || die "$name: redis-cli --version failed"
}

for name in $todo; do
	build "$name"
	rm -rf "${dest:?}/$name"
	mv "$work/$name" "$dest/$name"
done

for name in "${names[@]}"; do
	printf 'redis-servers: %-8s %s\n' "$name" "$("$dest/$name/bin/redis-server" --version)"
done
