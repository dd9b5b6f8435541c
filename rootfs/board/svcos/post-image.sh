#!/bin/sh
# Post-image: the SD card image (genimage) and the update bundle for the same build
# (host-rauc). Signing needs SVCOS_RAUC_CERT and SVCOS_RAUC_KEY from the build environment.
set -eu
BOARD_DIR="$(dirname "$0")"
mkimage -A arm -T script -C none -d "$BOARD_DIR/boot.cmd" "$BINARIES_DIR/boot.scr"
GENIMAGE_TMP="${BUILD_DIR}/genimage.tmp"
rm -rf "$GENIMAGE_TMP"
genimage --rootpath "$TARGET_DIR" --tmppath "$GENIMAGE_TMP" \
  --inputpath "$BINARIES_DIR" --outputpath "$BINARIES_DIR" --config "$BOARD_DIR/genimage.cfg"

: "${SVCOS_RAUC_CERT:?set SVCOS_RAUC_CERT to the signing certificate}"
: "${SVCOS_RAUC_KEY:?set SVCOS_RAUC_KEY to the signing key}"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$BR2_EXTERNAL_SVCOS_PATH/../Cargo.toml" | head -n1)"
COMPATIBLE="$(sed -n 's/^compatible=//p' "$TARGET_DIR/etc/rauc/system.conf")"
BUNDLE_DIR="${BUILD_DIR}/rauc-bundle"
rm -rf "$BUNDLE_DIR" && mkdir -p "$BUNDLE_DIR"
cp "$BINARIES_DIR/rootfs.ext4" "$BUNDLE_DIR/rootfs.ext4"
cat > "$BUNDLE_DIR/manifest.raucm" <<MANIFEST
[update]
compatible=$COMPATIBLE
version=$VERSION

[bundle]
format=verity

[image.rootfs]
filename=rootfs.ext4
MANIFEST
rm -f "$BINARIES_DIR/svcos-$VERSION.raucb"
rauc bundle --cert="$SVCOS_RAUC_CERT" --key="$SVCOS_RAUC_KEY" \
  "$BUNDLE_DIR" "$BINARIES_DIR/svcos-$VERSION.raucb"
