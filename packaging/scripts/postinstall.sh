#!/bin/sh
# fibril postinstall, for both the .deb (postinst) and the .rpm (%post).
# Arguments: deb "configure <old-version>" (no old version on a first
# install); rpm "1" on install, "2" on upgrade.
set -e

first=no
case "$1" in
	configure) [ -z "$2" ] && first=yes ;;
	1) first=yes ;;
esac

# The config is readable by the service's group only. On an upgrade the
# file is the operator's: leave its owner and mode alone.
if [ "$first" = yes ] && [ -f /etc/fibril/fibril.toml ]; then
	chown root:fibril /etc/fibril /etc/fibril/fibril.toml
	chmod 0750 /etc/fibril
	chmod 0640 /etc/fibril/fibril.toml
fi

# systemd only where it runs (not in containers or chroots without it).
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	if [ "$first" = yes ]; then
		systemctl enable fibril.service >/dev/null 2>&1 || true
		systemctl start fibril.service || true
	else
		systemctl try-restart fibril.service || true
	fi
fi
exit 0
