################################################################################
#
# svcos
#
################################################################################

# Built from the workspace this external tree lives in (rootfs/ is one level below its root).
SVCOS_VERSION = 0.1.0
SVCOS_SITE = $(BR2_EXTERNAL_SVCOS_PATH)/..
SVCOS_SITE_METHOD = local
SVCOS_LICENSE = GPL-3.0-or-later

# The workspace's one executable lives in the `svcos` package under services/svcos; the cargo
# infrastructure runs `cargo build --release`/`cargo install --path ./` there (with the
# workspace's Cargo.lock, --locked, offline from the vendored sources) and installs the binary to
# $(TARGET_DIR)/usr/bin/svcos. The image build is `cargo build --release -p svcos
# --no-default-features`: without the default `sim` feature, so the simulated board, the test
# pool and its Stratum V2 upstream stay out of the image (docs/PERFORMANCE.md, "Binary size").
SVCOS_SUBDIR = services/svcos
# Without default features the binary links the system libsqlite3 (the `bundled-sqlite` feature
# is off): Buildroot's sqlite package, found through pkg-config.
SVCOS_DEPENDENCIES = host-pkgconf sqlite tzdata
SVCOS_CARGO_BUILD_OPTS = -p svcos --no-default-features --bin svcos
SVCOS_CARGO_INSTALL_OPTS = --no-default-features --bin svcos

# The same users as systemd/svcos.sysusers, created at image build time (makeusers(5) syntax):
# one user per service, primary group svcos; only hw-agent reaches the UART/I2C/GPIO devices.
define SVCOS_USERS
	svcos-hw-agent -1 svcos -1 * /var/lib/svcos/hw-agent - dialout,i2c,gpio svcOS hardware agent
	svcos-stratum-agent -1 svcos -1 * /var/lib/svcos/stratum-agent - - svcOS pool client
	svcos-auth -1 svcos -1 * /var/lib/svcos/auth - - svcOS authentication
	svcos-tuner -1 svcos -1 * /var/lib/svcos/tuner - - svcOS tuner
	svcos-legacy-tcp -1 svcos -1 * /var/lib/svcos/legacy-tcp - - svcOS cgminer API
	svcos-gateway -1 svcos -1 * /var/lib/svcos/gateway - - svcOS REST gateway
	svcos-proxy -1 svcos -1 * /var/lib/svcos/proxy - - svcOS dashboard proxy
endef

$(eval $(cargo-package))
