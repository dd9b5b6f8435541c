#!/bin/sh
# Post-build: install the RAUC keyring the image trusts. The certificate comes from the build
# environment (SVCOS_RAUC_KEYRING=/path/to/cert.pem); there is no default, so an image is never
# built trusting a development key by accident.
set -eu
TARGET_DIR="$1"
: "${SVCOS_RAUC_KEYRING:?set SVCOS_RAUC_KEYRING to the PEM certificate bundles are signed with}"
install -D -m 0644 "$SVCOS_RAUC_KEYRING" "$TARGET_DIR/etc/rauc/keyring.pem"
# SSH (dropbear): the root file system is read-only, so the host keys dropbear makes on first
# use (/etc/dropbear) and root's authorised keys (~/.ssh) live on the data partition
# (directories from tmpfiles.d; keys copied there by svcos-ssh-keys.service). Buildroot links
# /etc/dropbear to /var/run/dropbear, which would give the unit new host keys at every boot.
rm -rf "$TARGET_DIR/etc/dropbear" "$TARGET_DIR/root/.ssh"
ln -s /var/lib/svcos/ssh/hostkeys "$TARGET_DIR/etc/dropbear"
mkdir -p "$TARGET_DIR/root"
ln -s /var/lib/svcos/ssh/root "$TARGET_DIR/root/.ssh"
