//! Real Linux drivers: i2c-dev, hwmon fans, sysfs GPIO.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use i2cdev::core::{I2CMessage, I2CTransfer};
use i2cdev::linux::{LinuxI2CBus, LinuxI2CMessage};

use super::{DriverError, FanReading, Fans, Gpio, I2cBus};

/// An i2c-dev bus (`/dev/i2c-N`), using `I2C_RDWR` so a register read is one transaction with a
/// repeated start, as PMBus devices expect.
pub struct LinuxI2c {
    bus: LinuxI2CBus,
    number: u32,
}

impl LinuxI2c {
    /// Open `/dev/i2c-<number>`.
    pub fn open(number: u32) -> Result<Self, DriverError> {
        let path = format!("/dev/i2c-{number}");
        let bus = LinuxI2CBus::new(&path).map_err(|e| DriverError::I2c {
            bus: number,
            address: 0,
            message: e.to_string(),
        })?;
        Ok(LinuxI2c { bus, number })
    }
}

impl I2cBus for LinuxI2c {
    fn transfer(&mut self, address: u16, write: &[u8], read: &mut [u8]) -> Result<(), DriverError> {
        let mut msgs = Vec::with_capacity(2);
        if !write.is_empty() {
            msgs.push(LinuxI2CMessage::write(write).with_address(address));
        }
        if !read.is_empty() {
            msgs.push(LinuxI2CMessage::read(read).with_address(address));
        }
        if msgs.is_empty() {
            return Ok(());
        }
        self.bus
            .transfer(&mut msgs)
            .map(|_| ())
            .map_err(|e| DriverError::I2c {
                bus: self.number,
                address,
                message: e.to_string(),
            })
    }
}

fn read_trimmed(path: &Path) -> Result<String, DriverError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| DriverError::Io {
            device: path.display().to_string(),
            source,
        })
}

fn write_str(path: &Path, value: &str) -> Result<(), DriverError> {
    std::fs::write(path, value).map_err(|source| DriverError::Io {
        device: path.display().to_string(),
        source,
    })
}

/// Fans through a hwmon directory: `pwm<N>` (0–255, N from 1) and `fan<N>_input` (rpm).
pub struct SysfsFans {
    dir: PathBuf,
    count: usize,
    duty: Vec<u32>,
}

impl SysfsFans {
    /// Fans 1..=count under `dir` (e.g. `/sys/class/hwmon/hwmon0`); puts them in manual mode.
    pub fn open(dir: &Path, count: usize) -> Result<Self, DriverError> {
        for n in 1..=count {
            let enable = dir.join(format!("pwm{n}_enable"));
            // 1 = manual PWM control; drivers without the file are always manual.
            if enable.exists() {
                write_str(&enable, "1")?;
            }
        }
        Ok(SysfsFans {
            dir: dir.to_path_buf(),
            count,
            duty: vec![0; count],
        })
    }
}

impl Fans for SysfsFans {
    fn count(&self) -> usize {
        self.count
    }

    fn set_pwm(&mut self, fan: usize, percent: u32) -> Result<(), DriverError> {
        let percent = percent.min(100);
        let raw = percent * 255 / 100;
        write_str(&self.dir.join(format!("pwm{}", fan + 1)), &raw.to_string())?;
        if let Some(d) = self.duty.get_mut(fan) {
            *d = percent;
        }
        Ok(())
    }

    fn read(&mut self) -> Result<Vec<FanReading>, DriverError> {
        (0..self.count)
            .map(|i| {
                let path = self.dir.join(format!("fan{}_input", i + 1));
                let rpm = read_trimmed(&path)?
                    .parse()
                    .map_err(|_| DriverError::Protocol {
                        device: path.display().to_string(),
                        message: "not a number".into(),
                    })?;
                Ok(FanReading {
                    rpm,
                    pwm_percent: self.duty[i],
                })
            })
            .collect()
    }
}

/// GPIO through `/sys/class/gpio`: lines are exported on first use, named through the board's
/// line map (`[hardware] gpio_lines`), since the numbering differs per control board.
pub struct SysfsGpio {
    root: PathBuf,
    map: BTreeMap<String, u32>,
    exported: Vec<u32>,
}

impl SysfsGpio {
    /// GPIO under `root` (normally `/sys/class/gpio`) with a name → number map.
    pub fn new(root: &Path, map: BTreeMap<String, u32>) -> Self {
        SysfsGpio {
            root: root.to_path_buf(),
            map,
            exported: Vec::new(),
        }
    }

    fn line_dir(&mut self, line: &str, output: bool) -> Result<PathBuf, DriverError> {
        let number = *self
            .map
            .get(line)
            .ok_or_else(|| DriverError::NoSuchLine(line.to_string()))?;
        let dir = self.root.join(format!("gpio{number}"));
        if !self.exported.contains(&number) {
            if !dir.exists() {
                write_str(&self.root.join("export"), &number.to_string())?;
            }
            write_str(&dir.join("direction"), if output { "out" } else { "in" })?;
            self.exported.push(number);
        }
        Ok(dir)
    }
}

impl Gpio for SysfsGpio {
    fn set(&mut self, line: &str, value: bool) -> Result<(), DriverError> {
        let dir = self.line_dir(line, true)?;
        write_str(&dir.join("value"), if value { "1" } else { "0" })
    }

    fn get(&mut self, line: &str) -> Result<bool, DriverError> {
        let dir = self.line_dir(line, false)?;
        let v = read_trimmed(&dir.join("value"))?;
        Ok(v == "1")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_fans_scale_duty_and_read_tach() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("fan1_input"), "4200\n").unwrap();
        std::fs::write(dir.path().join("fan2_input"), "0\n").unwrap();
        let mut fans = SysfsFans::open(dir.path(), 2).unwrap();
        fans.set_pwm(0, 50).unwrap();
        fans.set_pwm(1, 100).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("pwm1")).unwrap(),
            "127"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("pwm2")).unwrap(),
            "255"
        );
        let r = fans.read().unwrap();
        assert_eq!(
            r[0],
            FanReading {
                rpm: 4200,
                pwm_percent: 50
            }
        );
        assert_eq!(r[1].rpm, 0);
    }

    #[test]
    fn sysfs_gpio_exports_and_drives_named_lines() {
        let dir = tempfile::tempdir().unwrap();
        // A pre-exported line (the kernel creates the directory on export).
        std::fs::create_dir(dir.path().join("gpio37")).unwrap();
        std::fs::write(dir.path().join("gpio37/value"), "0").unwrap();
        let map = BTreeMap::from([("led_green".to_string(), 37), ("button".to_string(), 51)]);
        let mut gpio = SysfsGpio::new(dir.path(), map);
        gpio.set("led_green", true).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("gpio37/value")).unwrap(),
            "1"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("gpio37/direction")).unwrap(),
            "out"
        );
        assert!(matches!(
            gpio.set("nope", true),
            Err(DriverError::NoSuchLine(_))
        ));
        // Not exported yet: the export file is written (and the fake kernel does nothing).
        assert!(gpio.get("button").is_err());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("export")).unwrap(),
            "51"
        );
    }
}
