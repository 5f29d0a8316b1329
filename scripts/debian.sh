# Sourced by scripts/redis-servers.sh and scripts/promtool.sh: fetches
# programs as Debian builds them, from the Debian archive that this
# machine's apt sources already use, and runs them without installing them.
#
# Nothing on the system changes and no root is needed: apt-get runs on a
# configuration and state of its own in a temporary folder (the machine's
# apt sources, preferences, hooks and dpkg status are not read), and the
# packages are unpacked with dpkg-deb, not installed. A program runs on the
# C library and the other libraries of its own Debian release, through that
# release's dynamic loader, so that it does not depend on what the host has
# installed.
#
# The script that sources this sets tag (its name, for messages) and
# archive_var (the variable that names a Debian mirror when the machine's
# apt sources do not), then calls, in turn:
#
#   debian_lock DEST                   take turns with other runs on DEST
#   debian_start DEST                  find the archive; a work folder under DEST
#   debian_unpack SUITE PACKAGE ROOT   PACKAGE and its libraries, unpacked in ROOT
#   debian_wrap OUT NAME PROGRAM ABOUT OUT/bin/NAME runs OUT/root/PROGRAM
#
# and moves what it built out of $work, which is removed on exit.

die() {
	echo "$tag: $*" >&2
	exit 1
}

# debian_lock DEST: checks that this machine can fetch Debian packages,
# then waits for any other run on DEST to end (two `make test` at once take
# turns; the second then finds the first's work done).
debian_lock() {
	local tool
	for tool in apt-get apt-cache dpkg-deb dpkg flock; do
		command -v "$tool" >/dev/null 2>&1 ||
			die "needs $tool: this script fetches Debian packages and runs on Debian"
	done
	exec 9>"$1/.lock"
	flock 9
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

# debian_start DEST: the archive ($archive_var, or else the machine's
# own), the keyring that checks it, and a work folder $work under DEST.
debian_start() {
	archive=${!archive_var:-$(host_archive)}
	[ -n "$archive" ] ||
		die "found no Debian archive for this machine's release in /etc/apt/sources.list{,.d}; set $archive_var to a Debian mirror's URI"
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -r "$keyring" ] || die "needs $keyring (the debian-archive-keyring package) to check the archive's signatures"
	arch=$(dpkg --print-architecture)

	work=$(mktemp -d "$1/.work.XXXXXX")
	trap 'rm -rf "$work"' EXIT

	# A proxy set in the machine's apt configuration still applies; nothing
	# else of that configuration is read.
	http_proxy_conf= https_proxy_conf=
	eval "$(apt-config shell http_proxy_conf Acquire::http::Proxy https_proxy_conf Acquire::https::Proxy 2>/dev/null || true)"
}

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
	echo "$tag: reading the package index of $suite from $archive"
	APT_CONFIG=$dir/apt.conf apt-get -qq --error-on=any update ||
		die "apt-get update of $suite from $archive failed (is it a Debian archive?)"
}

# needed SUITE PACKAGE: PACKAGE and the libraries it needs, transitively:
# the library packages (lib*, lua-*, zlib1g) among its Depends and
# Pre-Depends. The rest, such as adduser, and the JavaScript of a web page
# (libjs-*), serve an installed package, not the binary; debian_wrap checks
# that no library is missing.
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
			awk '$1 ~ /^\|?(Pre)?Depends:$/ && $2 ~ /^(lib|lua-|zlib1g$)/ && $2 !~ /^libjs-/ { print $2 }' | sort -u)
		level=("${next[@]}")
	done
}

# debian_unpack SUITE PACKAGE ROOT: PACKAGE of Debian SUITE and the
# libraries it needs, unpacked in ROOT.
debian_unpack() {
	local suite=$1 package=$2 root=$3 dir=$work/apt-$1
	[ -f "$dir/apt.conf" ] || setup_apt "$suite"
	local packages
	mapfile -t packages < <(needed "$suite" "$package")
	echo "$tag: ${packages[*]} from $suite"
	(cd "$dir/debs" && APT_CONFIG=$dir/apt.conf apt-get -qq download "${packages[@]}") ||
		die "downloading ${packages[*]} from $suite failed"
	mkdir -p "$root"
	local deb
	for deb in "$dir"/debs/*.deb; do
		case " ${packages[*]} " in *" $(dpkg-deb -f "$deb" Package) "*) dpkg-deb -x "$deb" "$root" ;; esac
	done
}

# debian_wrap OUT NAME PROGRAM ABOUT: OUT/bin/NAME, a script that runs
# OUT/root/PROGRAM on the loader and libraries unpacked in OUT/root, and
# says ABOUT in a comment. It fails if the program would load a library
# from the host.
debian_wrap() {
	local out=$1 name=$2 program=$3 about=$4 root=$1/root
	# The release's own loader and libraries: bullseye and bookworm keep
	# them in /lib, trixie in /usr/lib.
	local loader libdirs=() d
	loader=$(cd "$root" && ls {usr/,}lib/*-linux-gnu*/ld-linux*.so.* 2>/dev/null | head -n 1) ||
		true
	[ -n "$loader" ] || die "no dynamic loader among the libraries unpacked for $program"
	for d in "$root"/{usr/,}lib/*-linux-gnu*; do
		[ -d "$d" ] && libdirs+=("\$root/${d#"$root"/}")
	done
	local libpath
	libpath=$(
		IFS=:
		echo "${libdirs[*]}"
	)

	# Every library must come from the release: one that the loader finds
	# on the host instead would make the program depend on the host.
	local strays
	strays=$("$root/$loader" --library-path "${libpath//\$root/$root}" --list "$root/$program" |
		awk -v root="$root" '/not found/ || ($2 == "=>" && index($3, root) != 1)') || true
	[ -z "$strays" ] || die "$program: libraries not unpacked with it:"$'\n'"$strays"

	mkdir -p "$out/bin"
	cat >"$out/bin/$name" <<-EOF
		#!/bin/sh
		# $about, run on that
		# release's own loader and libraries. Written by scripts/$tag.sh.
		root=\$(cd "\$(dirname "\$0")/../root" && pwd)
		exec "\$root/$loader" --library-path "$libpath" "\$root/$program" "\$@"
	EOF
	chmod +x "$out/bin/$name"
}
