//! RAUC's D-Bus API as the updater uses it: `de.pengutronix.rauc.Installer` at `/` on the bus
//! named `de.pengutronix.rauc`. The same proxy talks to the real `rauc service` on the image's
//! system bus and to the sim's stand-in ([`super::simslots`]) on the sim's bus.

use std::collections::HashMap;

use zbus::zvariant::{OwnedValue, Value};

/// Well-known bus name of RAUC.
pub const BUS_NAME: &str = "de.pengutronix.rauc";
/// Object path of the installer.
pub const OBJECT_PATH: &str = "/";
/// Interface name.
pub const INTERFACE: &str = "de.pengutronix.rauc.Installer";

/// One row of `GetSlotStatus`: slot name and its attributes.
pub type SlotRow = (String, HashMap<String, OwnedValue>);

/// The installer, as RAUC 1.8 publishes it.
#[zbus::proxy(
    interface = "de.pengutronix.rauc.Installer",
    default_service = "de.pengutronix.rauc",
    default_path = "/",
    gen_blocking = false
)]
pub trait Installer {
    /// Start installing a bundle; the result comes with `Completed`.
    fn install_bundle(&self, source: &str, args: HashMap<&str, Value<'_>>) -> zbus::Result<()>;
    /// Mark a slot (`booted`, `other` or a slot name) `good`, `bad` or `active`.
    fn mark(&self, state: &str, slot_identifier: &str) -> zbus::Result<(String, String)>;
    /// Every slot with its attributes.
    fn get_slot_status(&self) -> zbus::Result<Vec<SlotRow>>;
    /// The slot the bootloader tries first.
    fn get_primary(&self) -> zbus::Result<String>;
    /// An install finished: 0 on success.
    #[zbus(signal)]
    fn completed(&self, result: i32) -> zbus::Result<()>;
    /// `idle` or `installing`.
    #[zbus(property)]
    fn operation(&self) -> zbus::Result<String>;
    /// Message of the last failed install.
    #[zbus(property)]
    fn last_error(&self) -> zbus::Result<String>;
    /// (percent, message, nesting depth).
    #[zbus(property)]
    fn progress(&self) -> zbus::Result<(i32, String, i32)>;
    /// The model string bundles must carry.
    #[zbus(property)]
    fn compatible(&self) -> zbus::Result<String>;
    /// Bootname of the booted slot.
    #[zbus(property)]
    fn boot_slot(&self) -> zbus::Result<String>;
}

/// A string attribute of a slot row ("" when missing or not a string).
pub fn attr(row: &HashMap<String, OwnedValue>, key: &str) -> String {
    row.get(key)
        .and_then(|v| String::try_from(v.clone()).ok())
        .unwrap_or_default()
}

/// A string as an owned D-Bus value.
pub fn string_value(s: &str) -> OwnedValue {
    OwnedValue::from(zbus::zvariant::Str::from(s.to_owned()))
}
