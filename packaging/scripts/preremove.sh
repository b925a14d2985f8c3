#!/bin/sh
# fibril preremove, for both the .deb (prerm) and the .rpm (%preun).
# Arguments: deb "remove" or "upgrade <new-version>"; rpm "0" on erase,
# "1" on upgrade. Only a removal stops and disables the service; an
# upgrade restarts it from postinstall.
set -e

case "$1" in
	remove | 0)
		if [ -d /run/systemd/system ]; then
			systemctl disable --now fibril.service >/dev/null 2>&1 || true
		fi
		;;
esac
exit 0
