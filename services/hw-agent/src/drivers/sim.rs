//! Sim drivers: the simulated board's I2C, fans and GPIO reached over `HwSimService`.
//!
//! The board thread is synchronous (like the i2c-dev and sysfs calls it makes on a miner), so
//! these drivers own a small current-thread tokio runtime and block on each call. All three
//! share one [`SimLink`], hence one connection to hw-sim.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use svcos_proto::hwsim::v1::hw_sim_service_client::HwSimServiceClient;
use svcos_proto::hwsim::v1::{
    I2cTransferRequest, ReadFansRequest, ReadGpioRequest, SetFanPwmRequest, SetGpioRequest,
};
use tonic::transport::Channel;

use super::{DriverError, FanReading, Fans, Gpio, I2cBus};

/// Deadline of one peripheral call: the board thread must never hang on a missing sim.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);

struct Inner {
    rt: Option<tokio::runtime::Runtime>,
    client: HwSimServiceClient<Channel>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // A runtime may not be dropped (blocking) inside another one, which happens when
        // start-up fails on the async side; shutting it down in the background always works.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// One connection to hw-sim, shared by the sim drivers of one thread.
#[derive(Clone)]
pub struct SimLink(Arc<Mutex<Inner>>);

impl SimLink {
    /// Connect (lazily) to hw-sim's socket.
    pub fn new(socket: PathBuf) -> Result<Self, DriverError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| DriverError::Io {
                device: "sim runtime".into(),
                source,
            })?;
        // The lazy channel spawns its worker on the runtime it is created in.
        let client = {
            let _guard = rt.enter();
            HwSimServiceClient::new(svcos_common::ipc::channel_with_timeout(
                socket,
                CALL_TIMEOUT,
            ))
        };
        Ok(SimLink(Arc::new(Mutex::new(Inner {
            rt: Some(rt),
            client,
        }))))
    }

    fn call<T, F, Fut>(&self, name: &'static str, f: F) -> Result<T, DriverError>
    where
        F: FnOnce(HwSimServiceClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let inner = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let client = inner.client.clone();
        let Some(rt) = inner.rt.as_ref() else {
            return Err(DriverError::Sim {
                call: name,
                status: tonic::Status::unavailable("sim link closed"),
            });
        };
        rt.block_on(async {
            match tokio::time::timeout(CALL_TIMEOUT, f(client)).await {
                Ok(r) => r,
                Err(_) => Err(tonic::Status::deadline_exceeded("hw-sim call timed out")),
            }
        })
        .map(|r| r.into_inner())
        .map_err(|status| DriverError::Sim { call: name, status })
    }
}

/// I2C over `HwSimService.I2cTransfer`.
pub struct SimI2c {
    link: SimLink,
    bus: u32,
}

impl SimI2c {
    /// The sim's bus `bus`.
    pub fn new(link: SimLink, bus: u32) -> Self {
        SimI2c { link, bus }
    }
}

impl I2cBus for SimI2c {
    fn transfer(&mut self, address: u16, write: &[u8], read: &mut [u8]) -> Result<(), DriverError> {
        let req = I2cTransferRequest {
            bus: self.bus,
            address: u32::from(address),
            write: write.to_vec(),
            read_len: read.len() as u32,
        };
        let resp = self.link.call(
            "I2cTransfer",
            |mut c| async move { c.i2c_transfer(req).await },
        )?;
        if resp.read.len() != read.len() {
            return Err(DriverError::I2c {
                bus: self.bus,
                address,
                message: format!("short read: {} of {} bytes", resp.read.len(), read.len()),
            });
        }
        read.copy_from_slice(&resp.read);
        Ok(())
    }
}

/// Fans over `SetFanPwm`/`ReadFans`.
pub struct SimFans {
    link: SimLink,
    count: usize,
}

impl SimFans {
    /// `count` fans as GetBoard announced them.
    pub fn new(link: SimLink, count: usize) -> Self {
        SimFans { link, count }
    }
}

impl Fans for SimFans {
    fn count(&self) -> usize {
        self.count
    }

    fn set_pwm(&mut self, fan: usize, percent: u32) -> Result<(), DriverError> {
        let req = SetFanPwmRequest {
            fan_id: fan as u32,
            pwm_percent: percent.min(100),
        };
        self.link
            .call("SetFanPwm", |mut c| async move { c.set_fan_pwm(req).await })
            .map(|_| ())
    }

    fn read(&mut self) -> Result<Vec<FanReading>, DriverError> {
        let resp = self.link.call("ReadFans", |mut c| async move {
            c.read_fans(ReadFansRequest {}).await
        })?;
        let mut out = vec![FanReading::default(); self.count];
        for f in resp.fans {
            if let Some(slot) = out.get_mut(f.fan_id as usize) {
                *slot = FanReading {
                    rpm: f.rpm,
                    pwm_percent: f.pwm_percent,
                };
            }
        }
        Ok(out)
    }
}

/// GPIO over `SetGpio`/`ReadGpio`.
pub struct SimGpio {
    link: SimLink,
}

impl SimGpio {
    /// GPIO of the simulated board.
    pub fn new(link: SimLink) -> Self {
        SimGpio { link }
    }
}

impl Gpio for SimGpio {
    fn set(&mut self, line: &str, value: bool) -> Result<(), DriverError> {
        let req = SetGpioRequest {
            line: line.to_string(),
            value,
        };
        self.link
            .call("SetGpio", |mut c| async move { c.set_gpio(req).await })
            .map(|_| ())
    }

    fn get(&mut self, line: &str) -> Result<bool, DriverError> {
        let req = ReadGpioRequest {
            line: line.to_string(),
        };
        self.link
            .call("ReadGpio", |mut c| async move { c.read_gpio(req).await })
            .map(|r| r.value)
    }
}
