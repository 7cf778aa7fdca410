//! The few NVML readings a benchmark header needs (driver version, clocks, temperature,
//! power), loaded at run time like every other NVIDIA library; absent NVML gives `None`.

use libloading::{Library, Symbol};
use serde::Serialize;
use std::ffi::{CStr, CString, c_char, c_uint, c_void};

type Device = *mut c_void;
const NVML_CLOCK_SM: c_uint = 1;
const NVML_CLOCK_MEM: c_uint = 2;
const NVML_TEMPERATURE_GPU: c_uint = 0;

/// What the GPU's clocks and sensors read at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct GpuState {
    pub sm_mhz: u32,
    pub sm_max_mhz: u32,
    pub mem_mhz: u32,
    pub temperature_c: Option<u32>,
    pub power_w: Option<f64>,
    /// NVML's clock event reasons (throttling) bitmask; 0 is none, 1 is idle.
    pub clock_event_reasons: Option<u64>,
}

/// NVML, opened for the device with a given PCI bus id.
pub struct Nvml {
    lib: Library,
    device: Device,
}

impl Nvml {
    pub fn open(pci_bus_id: &str) -> Option<Self> {
        let lib = unsafe { Library::new("libnvidia-ml.so.1") }.ok()?;
        let device = unsafe {
            let init: Symbol<unsafe extern "C" fn() -> i32> = lib.get(b"nvmlInit_v2").ok()?;
            if init() != 0 {
                return None;
            }
            let by_bus: Symbol<unsafe extern "C" fn(*const c_char, *mut Device) -> i32> =
                lib.get(b"nvmlDeviceGetHandleByPciBusId_v2").ok()?;
            let id = CString::new(pci_bus_id).ok()?;
            let mut device = std::ptr::null_mut();
            if by_bus(id.as_ptr(), &mut device) != 0 {
                return None;
            }
            device
        };
        Some(Nvml { lib, device })
    }

    /// The driver's version string, e.g. `580.159.04`.
    pub fn driver_version(&self) -> Option<String> {
        let mut buf = [0 as c_char; 96];
        unsafe {
            let f: Symbol<unsafe extern "C" fn(*mut c_char, c_uint) -> i32> =
                self.lib.get(b"nvmlSystemGetDriverVersion").ok()?;
            (f(buf.as_mut_ptr(), buf.len() as c_uint) == 0)
                .then(|| CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
        }
    }

    pub fn state(&self) -> Option<GpuState> {
        unsafe {
            let clock: Symbol<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> i32> =
                self.lib.get(b"nvmlDeviceGetClockInfo").ok()?;
            let max_clock: Symbol<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> i32> =
                self.lib.get(b"nvmlDeviceGetMaxClockInfo").ok()?;
            let read = |f: &Symbol<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> i32>, kind| {
                let mut v = 0;
                (f(self.device, kind, &mut v) == 0).then_some(v)
            };
            let temperature_c = self
                .lib
                .get::<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> i32>(b"nvmlDeviceGetTemperature")
                .ok()
                .and_then(|f| read(&f, NVML_TEMPERATURE_GPU));
            let power_w = self
                .lib
                .get::<unsafe extern "C" fn(Device, *mut c_uint) -> i32>(b"nvmlDeviceGetPowerUsage")
                .ok()
                .and_then(|f| {
                    let mut milliwatts = 0;
                    (f(self.device, &mut milliwatts) == 0).then_some(milliwatts as f64 / 1000.0)
                });
            let clock_event_reasons = self
                .lib
                .get::<unsafe extern "C" fn(Device, *mut u64) -> i32>(b"nvmlDeviceGetCurrentClocksEventReasons")
                .ok()
                .and_then(|f| {
                    let mut reasons = 0;
                    (f(self.device, &mut reasons) == 0).then_some(reasons)
                });
            Some(GpuState {
                sm_mhz: read(&clock, NVML_CLOCK_SM)?,
                sm_max_mhz: read(&max_clock, NVML_CLOCK_SM)?,
                mem_mhz: read(&clock, NVML_CLOCK_MEM)?,
                temperature_c,
                power_w,
                clock_event_reasons,
            })
        }
    }
}
