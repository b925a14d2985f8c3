#!/usr/bin/env bash
# Package tests (make package-test): inspect the four packages in DIST,
# then install the amd64 .deb on this machine and exercise it: user,
# modes, --check-config, a real start with a publish and a consume, an
# upgrade over an edited config with stdin closed, remove and purge. Then
# the .rpm into a scratch root with rpm -V, lintian, and systemd-analyze
# on the installed unit.
#
# Needs root, dpkg, rpm, lintian and systemd-analyze (.ci/run installs
# them). It installs and purges the fibril package and removes the fibril
# user and /var/lib/fibril afterwards, so it refuses to run where a fibril
# package is already installed (under CI=true it clears an earlier run's).
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${1:-dist}

say() { printf '== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "run as root: the test installs the package"
for tool in dpkg dpkg-deb rpm lintian systemd-analyze setpriv; do
	command -v "$tool" >/dev/null || fail "$tool is missing (apt-get install dpkg rpm lintian systemd util-linux)"
done
if dpkg-query -W -f '${Status}' fibril 2>/dev/null | grep -q installed; then
	# Under CI a leftover can only be an earlier run's, cut short: clear it.
	[ "${CI:-}" = true ] || fail "a fibril package is already installed here; remove it first"
	say "clearing a fibril package left by an earlier run"
	dpkg --purge fibril >/dev/null
	rm -rf /var/lib/fibril
	userdel fibril >/dev/null 2>&1 || true
	getent group fibril >/dev/null && groupdel fibril >/dev/null 2>&1
fi

deb=$(ls "$DIST"/fibril_*_amd64.deb)
rpm_amd64=$(ls "$DIST"/fibril-*.x86_64.rpm)
ls "$DIST"/fibril_*_arm64.deb "$DIST"/fibril-*.aarch64.rpm >/dev/null || fail "arm64 packages missing"
TMP=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	dpkg --purge fibril >/dev/null 2>&1 || true
	rm -rf /var/lib/fibril
	userdel fibril >/dev/null 2>&1 || true
	getent group fibril >/dev/null && groupdel fibril >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT

# --- Contents: the same files, modes and owners in both formats. --------
say "package contents (dpkg-deb -I/-c, rpm -qip/-qlp/-qcp/--scripts)"
dpkg-deb -I "$deb" >"$TMP/deb.info"
for field in 'Package: fibril' 'Section: net' 'Architecture: amd64' 'Maintainer: Fibril developers <fibril-edge@users.noreply.github.com>' 'Description: message broker'; do
	grep -q "^ $field" "$TMP/deb.info" || fail "deb control lacks '$field'"
done
for script in preinst postinst prerm postrm conffiles; do
	grep -qw "$script" "$TMP/deb.info" || fail "deb lacks $script"
done
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" = /etc/fibril/fibril.toml ] || fail "deb conffiles"
rpm -qip "$rpm_amd64" >"$TMP/rpm.info"
grep -q '^Name *: fibril' "$TMP/rpm.info" || fail "rpm name"
grep -q '^License *: Apache-2.0' "$TMP/rpm.info" || fail "rpm license: $(grep '^License' "$TMP/rpm.info")"
[ "$(rpm -qcp "$rpm_amd64")" = /etc/fibril/fibril.toml ] || fail "rpm config files: $(rpm -qcp "$rpm_amd64")"
rpm -qp --scripts "$rpm_amd64" >"$TMP/rpm.scripts"
for s in preinstall postinstall preuninstall postuninstall; do
	grep -q "^$s scriptlet" "$TMP/rpm.scripts" || fail "rpm lacks its $s scriptlet"
done
# mode owner group path, for files (not directories), sorted.
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); split($2, og, "/"); print $1, og[1], og[2], $6 }' |
	grep -v '^.* /usr/share/lintian/' | sort >"$TMP/deb.files"
rpm -qlp -v "$rpm_amd64" | awk '$1 !~ /^d/ { print $1, $3, $4, $9 }' | sort >"$TMP/rpm.files"
diff -u "$TMP/deb.files" "$TMP/rpm.files" || fail "deb and rpm contents differ"
cat >"$TMP/want.files" <<'EOF'
-rw-r----- root fibril /etc/fibril/fibril.toml
-rw-r--r-- root root /usr/lib/systemd/system/fibril.service
-rw-r--r-- root root /usr/share/bash-completion/completions/fibril
-rw-r--r-- root root /usr/share/doc/fibril/changelog.gz
-rw-r--r-- root root /usr/share/doc/fibril/copyright
-rw-r--r-- root root /usr/share/fish/vendor_completions.d/fibril.fish
-rw-r--r-- root root /usr/share/man/man1/fibril.1.gz
-rw-r--r-- root root /usr/share/man/man8/fibrild.8.gz
-rw-r--r-- root root /usr/share/zsh/vendor-completions/_fibril
-rwxr-xr-x root root /usr/bin/fibril
-rwxr-xr-x root root /usr/bin/fibrild
EOF
diff -u <(sort "$TMP/want.files") "$TMP/deb.files" || fail "unexpected package contents"
dpkg-deb -c "$deb" | grep -q ' \./var/lib/fibril' && fail "the package ships /var/lib/fibril"

# --- lintian. ----------------------------------------------------------
say "lintian --fail-on error"
lintian --fail-on error "$deb" >"$TMP/lintian.log" 2>&1 || { cat "$TMP/lintian.log"; fail "lintian reports errors"; }
grep -v 'running with root privileges' "$TMP/lintian.log" || true

# --- Install on this machine. ------------------------------------------
say "dpkg -i (stdin closed)"
dpkg -i "$deb" </dev/null >"$TMP/dpkg.log" 2>&1 || { cat "$TMP/dpkg.log"; fail "dpkg -i"; }
getent passwd fibril >/dev/null || fail "no fibril user"
getent group fibril >/dev/null || fail "no fibril group"
[ "$(stat -c '%a %U %G' /etc/fibril/fibril.toml)" = "640 root fibril" ] || fail "config: $(stat -c '%a %U %G' /etc/fibril/fibril.toml)"
[ "$(stat -c '%a %U %G' /etc/fibril)" = "750 root fibril" ] || fail "/etc/fibril: $(stat -c '%a %U %G' /etc/fibril)"
[ "$(stat -c '%a %U' /usr/bin/fibrild)" = "755 root" ] || fail "fibrild mode"
[ ! -e /var/lib/fibril ] || fail "the install created /var/lib/fibril (StateDirectory= does)"
version=$(dpkg-deb -f "$deb" Version)
/usr/bin/fibrild --version | grep -q . || fail "fibrild --version"
/usr/bin/fibril --version | grep -q . || fail "fibril --version"
setpriv --reuid fibril --regid fibril --init-groups /usr/bin/fibrild --check-config /etc/fibril/fibril.toml ||
	fail "fibrild --check-config on the installed config (as the fibril user)"

say "systemd-analyze verify and security"
systemd-analyze verify --man=no /usr/lib/systemd/system/fibril.service || fail "systemd-analyze verify"
exposure=$(systemd-analyze security --offline=yes /usr/lib/systemd/system/fibril.service 2>&1 |
	sed -n 's/.*Overall exposure level for fibril.service: \([0-9.]*\).*/\1/p')
echo "exposure $exposure"
awk -v e="$exposure" 'BEGIN { exit !(e != "" && e <= 2.0) }' || fail "exposure level '$exposure' is above 2.0"

# start runs the installed fibrild as systemd would (user fibril, data in
# the state directory, the installed config) on ephemeral ports, and sets
# pid, server and admin.
start() {
	install -d -o fibril -g fibril -m 0750 /var/lib/fibril # StateDirectory=fibril
	: >"$TMP/fibrild.log"
	setpriv --reuid fibril --regid fibril --init-groups \
		/usr/bin/fibrild --config /etc/fibril/fibril.toml \
		--server.listen 127.0.0.1:0 --admin.listen 127.0.0.1:0 2>"$TMP/fibrild.log" &
	pid=$!
	server= admin=
	for _ in $(seq 200); do
		server=$(sed -n 's/.*msg=listening proto=fibril addr=\([^ ]*\).*/\1/p' "$TMP/fibrild.log")
		admin=$(sed -n 's/.*msg=listening proto=admin addr=\([^ ]*\).*/\1/p' "$TMP/fibrild.log")
		[ -n "$server" ] && [ -n "$admin" ] && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	cat "$TMP/fibrild.log"
	fail "the installed fibrild did not start"
}
stop() {
	kill -TERM "$pid"
	wait "$pid" || { cat "$TMP/fibrild.log"; fail "fibrild did not stop cleanly"; }
	pid=
	grep -q 'msg=stopped' "$TMP/fibrild.log" || fail "no clean stop in the log"
}

say "start, publish, consume, stop"
start
grep -q "data_dir=/var/lib/fibril" "$TMP/fibrild.log" || fail "data not in /var/lib/fibril"
fibril queue declare orders --durable --admin "http://$admin" >/dev/null
fibril pub orders first --server "$server" >/dev/null
fibril pub orders kept --server "$server" >/dev/null
got=$(fibril sub orders --max 1 --timeout 10s --server "$server")
case "$got" in *first*) ;; *) fail "consumed '$got', want 'first'" ;; esac
stop

say "edit the config, upgrade with stdin closed"
printf '\n# operator edit\n[log]\nlevel = "debug"\n' >>/etc/fibril/fibril.toml
fibrild --check-config /etc/fibril/fibril.toml >/dev/null || fail "edited config does not check"
mkdir -p "$TMP/newer"
go run ./packaging/cmd/mkpkg --version "$version.1" --arch amd64 --format deb \
	--build build/package --dist "$TMP/newer" >/dev/null
dpkg -i "$TMP"/newer/fibril_*_amd64.deb </dev/null >"$TMP/dpkg.log" 2>&1 || { cat "$TMP/dpkg.log"; fail "upgrade"; }
[ "$(dpkg-query -W -f '${Version}' fibril)" = "$version.1" ] || fail "upgrade did not install $version.1"
grep -q '^# operator edit' /etc/fibril/fibril.toml || fail "the upgrade lost the config edit"
[ "$(stat -c '%a %U %G' /etc/fibril/fibril.toml)" = "640 root fibril" ] || fail "config mode after upgrade"
fibrild --config /etc/fibril/fibril.toml --print-config | grep -q "^level = 'debug'" ||
	fail "the edited log level is not in effect"
start
got=$(fibril sub orders --max 1 --timeout 10s --server "$server")
case "$got" in *kept*) ;; *) fail "after the upgrade consumed '$got', want 'kept'" ;; esac
stop

say "dpkg -r keeps data and config; dpkg --purge removes config"
dpkg -r fibril </dev/null >/dev/null
[ -d /var/lib/fibril/queues ] || [ -d /var/lib/fibril/meta ] || fail "remove deleted the data"
[ -f /etc/fibril/fibril.toml ] || fail "remove deleted the config"
[ ! -e /usr/bin/fibrild ] || fail "remove left the binary"
dpkg --purge fibril </dev/null >/dev/null
[ ! -e /etc/fibril ] || fail "purge left /etc/fibril"
[ -d /var/lib/fibril/meta ] || fail "purge deleted the data"

# --- rpm into a scratch root. ------------------------------------------
say "rpm --root scratch install, rpm -V"
root="$TMP/rpmroot"
mkdir -p "$root/etc"
# The scratch root has no shell for the scriptlets (--noscripts), so it
# gets the user and group the preinstall script would have made.
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
echo 'fibril:x:999:999::/var/lib/fibril:/usr/sbin/nologin' >>"$root/etc/passwd"
printf 'root:x:0:\nfibril:x:999:\n' >"$root/etc/group"
rpm --root "$root" --dbpath /var/lib/rpm --initdb
rpm --root "$root" --dbpath /var/lib/rpm -ivh --nodeps --noscripts "$rpm_amd64" >"$TMP/rpm.log" 2>&1 ||
	{ cat "$TMP/rpm.log"; fail "rpm install"; }
rpm --root "$root" --dbpath /var/lib/rpm -V fibril || fail "rpm -V"
[ "$(stat -c '%a %g' "$root/etc/fibril/fibril.toml")" = "640 999" ] || fail "rpm config mode"

say "ok"
