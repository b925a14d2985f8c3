#!/bin/sh
# fibril postremove, for both the .deb (postrm) and the .rpm (%postun).
# Arguments: deb "remove", "purge", "upgrade", ...; rpm "0" on erase, "1"
# on upgrade. Removal keeps the data in /var/lib/fibril and the config;
# purge (deb only) removes the config. The data directory and the fibril
# user are never removed by the package: delete them by hand
# (docs/install.md).
set -e

case "$1" in
	purge)
		rm -rf /etc/fibril
		;;
esac
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
