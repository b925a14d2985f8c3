#!/bin/sh
# fibril preinstall, for both the .deb (preinst) and the .rpm (%pre): create
# the fibril system user and group before the files are unpacked, so
# /etc/fibril/fibril.toml unpacks as root:fibril 0640.
set -e

if ! getent group fibril >/dev/null 2>&1; then
	groupadd --system fibril
fi
if ! getent passwd fibril >/dev/null 2>&1; then
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	useradd --system --gid fibril --home-dir /var/lib/fibril --no-create-home \
		--shell "$nologin" --comment "Fibril message broker" fibril
fi
exit 0
