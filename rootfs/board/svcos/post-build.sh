#!/bin/sh
# Post-build: install the RAUC keyring the image trusts. The certificate comes from the build
# environment (SVCOS_RAUC_KEYRING=/path/to/cert.pem); there is no default, so an image is never
# built trusting a development key by accident.
set -eu
TARGET_DIR="$1"
: "${SVCOS_RAUC_KEYRING:?set SVCOS_RAUC_KEYRING to the PEM certificate bundles are signed with}"
install -D -m 0644 "$SVCOS_RAUC_KEYRING" "$TARGET_DIR/etc/rauc/keyring.pem"
