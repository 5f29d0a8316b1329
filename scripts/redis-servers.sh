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
# Nothing on the system changes and no root is needed: apt-get runs on a
# configuration and state of its own in a temporary folder under DEST (the
# machine's apt sources, preferences, hooks and dpkg status are not read),
# and the packages are unpacked with dpkg-deb, not installed. Each server
# runs on the C library and the other libraries of its own Debian release,
# through that release's dynamic loader, so that it does not depend on what
# the host has installed. A name already in DEST is not fetched again; a
# name is moved into place only once its server has started, so an
# interrupted run leaves nothing half done. About 25 MB of downloads per
# Debian release the first time (its package index, then the packages).
#
# REDIS_SERVERS_ARCHIVE=URI overrides the archive (a Debian mirror);
# otherwise it is the one this machine's apt sources name for its own
# Debian release.
set -euo pipefail

all=(redis6 redis7 redis8 valkey8)

die() {
	echo "redis-servers: $*" >&2
	exit 1
}

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

for tool in apt-get apt-cache dpkg-deb dpkg flock; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "needs $tool: this script fetches Debian packages and runs on Debian (or install redis-server yourself)"
done

# Two runs on one DEST (two `make test` at once) take turns; the second
# then finds the first's servers ready.
exec 9>"$dest/.lock"
flock 9
todo=$(missing)
[ -n "$todo" ] || {
	echo "redis-servers: ${names[*]} already in $dest"
	exit 0
}

# The archive this machine's apt sources use for the machine's own Debian
# release: a line "deb [options] URI suite ..." in a .list file, or a
# stanza with "URIs:" and "Suites:" in a .sources file.
host_archive() {
	local codename
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	[ -n "$codename" ] || return 0
	{
		{ cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
			sed -e 's/#.*//' -e 's/\[[^]]*\]//' |
			awk -v suite="$codename" '$1 == "deb" && $3 == suite { print $2 }'
		{ cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } | sed '/^[[:space:]]*#/d' |
			awk -v suite="$codename" '
				BEGIN { RS = ""; FS = "\n" }
				{
					uri = ""; deb = 0; match_suite = 0; enabled = 1
					for (i = 1; i <= NF; i++) {
						split($i, kv, ":[ \t]*")
						key = tolower(kv[1]); value = substr($i, length(kv[1]) + 2)
						n = split(value, words, /[ \t]+/)
						for (j = 1; j <= n; j++) {
							if (key == "uris" && uri == "" && words[j] != "") uri = words[j]
							if (key == "types" && words[j] == "deb") deb = 1
							if (key == "suites" && words[j] == suite) match_suite = 1
							if (key == "enabled" && words[j] == "no") enabled = 0
						}
					}
					if (uri != "" && deb && match_suite && enabled) print uri
				}'
	} | head -n 1 || true
}

archive=${REDIS_SERVERS_ARCHIVE:-$(host_archive)}
[ -n "$archive" ] ||
	die "found no Debian archive for this machine's release in /etc/apt/sources.list{,.d}; set REDIS_SERVERS_ARCHIVE to a Debian mirror's URI"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || die "needs $keyring (the debian-archive-keyring package) to check the archive's signatures"
arch=$(dpkg --print-architecture)

work=$(mktemp -d "$dest/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A proxy set in the machine's apt configuration still applies; nothing
# else of that configuration is read.
http_proxy_conf= https_proxy_conf=
eval "$(apt-config shell http_proxy_conf Acquire::http::Proxy https_proxy_conf Acquire::https::Proxy 2>/dev/null || true)"

# setup_apt SUITE: an apt configuration that knows SUITE only, in
# $work/apt-SUITE, with its package index.
setup_apt() {
	local suite=$1 dir=$work/apt-$1
	mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/empty" "$dir/debs"
	: >"$dir/status"
	echo "deb [signed-by=$keyring] $archive $suite main" >"$dir/sources.list"
	cat >"$dir/apt.conf" <<-EOF
		Dir::Etc::main "/dev/null";
		Dir::Etc::parts "$dir/empty";
		Dir::Etc::sourcelist "$dir/sources.list";
		Dir::Etc::sourceparts "$dir/empty";
		Dir::Etc::preferences "/dev/null";
		Dir::Etc::preferencesparts "$dir/empty";
		Dir::State "$dir";
		Dir::State::lists "$dir/lists";
		Dir::State::status "$dir/status";
		Dir::Cache "$dir";
		Dir::Cache::archives "$dir/archives";
		Dir::Cache::pkgcache "";
		Dir::Cache::srcpkgcache "";
		APT::Architecture "$arch";
		APT::Architectures { "$arch"; };
		Acquire::Languages "none";
		APT::Sandbox::User "$(id -un)";
	EOF
	[ -z "$http_proxy_conf" ] || echo "Acquire::http::Proxy \"$http_proxy_conf\";" >>"$dir/apt.conf"
	[ -z "$https_proxy_conf" ] || echo "Acquire::https::Proxy \"$https_proxy_conf\";" >>"$dir/apt.conf"
	echo "redis-servers: reading the package index of $suite from $archive"
	APT_CONFIG=$dir/apt.conf apt-get -qq --error-on=any update ||
		die "apt-get update of $suite from $archive failed (is it a Debian archive?)"
}

# needed SUITE PACKAGE: PACKAGE and the libraries it needs, transitively:
# the library packages (lib*, lua-*, zlib1g) among its Depends and
# Pre-Depends. The rest, such as adduser, serve an installed package, not
# the binary; build checks that no library is missing.
needed() {
	local dir=$work/apt-$1
	local -A seen=()
	local level=("$2") next p
	while [ ${#level[@]} -gt 0 ]; do
		for p in "${level[@]}"; do
			seen[$p]=1
			echo "$p"
		done
		next=()
		while read -r p; do
			[ -n "${seen[$p]:-}" ] || next+=("$p")
		done < <(APT_CONFIG=$dir/apt.conf apt-cache depends --important "${level[@]}" |
			awk '$1 ~ /^\|?(Pre)?Depends:$/ && $2 ~ /^(lib|lua-|zlib1g$)/ { print $2 }' | sort -u)
		level=("${next[@]}")
	done
}

# build NAME: the server's packages unpacked in $work/NAME/root, its
# wrappers in $work/NAME/bin.
build() {
	local name=$1 suite package program dir out root
	suite=$(suite_of "$name") package=$(package_of "$name") program=$(program_of "$name")
	dir=$work/apt-$suite out=$work/$name root=$work/$name/root
	[ -f "$dir/apt.conf" ] || setup_apt "$suite"

	local packages
	mapfile -t packages < <(needed "$suite" "$package")
	echo "redis-servers: $name: ${packages[*]} from $suite"
	(cd "$dir/debs" && APT_CONFIG=$dir/apt.conf apt-get -qq download "${packages[@]}") ||
		die "$name: downloading ${packages[*]} from $suite failed"
	mkdir -p "$root" "$out/bin"
	local deb
	for deb in "$dir"/debs/*.deb; do
		case " ${packages[*]} " in *" $(dpkg-deb -f "$deb" Package) "*) dpkg-deb -x "$deb" "$root" ;; esac
	done

	# In Debian the server is the same binary as redis-check-rdb (or
	# valkey-check-rdb), which picks its role from the name it was run by.
	[ -x "$root/usr/bin/$program-check-rdb" ] || die "$name: $package has no /usr/bin/$program-check-rdb"
	ln -sf "$program-check-rdb" "$root/usr/bin/$program-server"

	# The release's own loader and libraries: bullseye and bookworm keep
	# them in /lib, trixie in /usr/lib.
	local loader libdirs=() d
	loader=$(cd "$root" && ls {usr/,}lib/*-linux-gnu*/ld-linux*.so.* 2>/dev/null | head -n 1) ||
		true
	[ -n "$loader" ] || die "$name: no dynamic loader among the unpacked libraries"
	for d in "$root"/{usr/,}lib/*-linux-gnu*; do
		[ -d "$d" ] && libdirs+=("\$root/${d#"$root"/}")
	done
	local libpath
	libpath=$(
		IFS=:
		echo "${libdirs[*]}"
	)

	local role
	for role in server cli; do
		cat >"$out/bin/redis-$role" <<-EOF
			#!/bin/sh
			# $name: $program-$role from Debian $suite ($package), run on that
			# release's own loader and libraries. Written by scripts/redis-servers.sh.
			root=\$(cd "\$(dirname "\$0")/../root" && pwd)
			exec "\$root/$loader" --library-path "$libpath" "\$root/usr/bin/$program-$role" "\$@"
		EOF
		chmod +x "$out/bin/redis-$role"
	done

	# Every library must come from the release: one that the loader finds
	# on the host instead would make the server depend on the host.
	local strays
	strays=$("$root/$loader" --library-path "${libpath//\$root/$root}" --list "$root/usr/bin/$program-check-rdb" |
		awk -v root="$root" '/not found/ || ($2 == "=>" && index($3, root) != 1)') || true
	[ -z "$strays" ] || die "$name: libraries not unpacked from $suite:"$'\n'"$strays"

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
