//! What a result needs to be reproduced and judged: the build, the seed, the GPU and its
//! clocks, the driver, and which cuDNN was loaded from which file.

use super::nvml::{GpuState, Nvml};
use crate::{Gpu, ModuleKind, Result, conv::cudnn};
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

/// The commit this binary was built from (`build.rs`), `-dirty` when the tree had changes.
pub const COMMIT: &str = env!("CONVKIT_COMMIT");

#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    pub convkit: &'static str,
    pub commit: &'static str,
    pub command: String,
    pub seed: u64,
    /// UTC, ISO 8601.
    pub started: String,
    pub gpu: String,
    pub compute_capability: u32,
    pub sm_count: u32,
    /// What the kernels were loaded from, e.g. `sm_90 cubin` or `sm_90 PTX (JIT)`.
    pub kernels: String,
    pub pci_bus_id: String,
    /// NVIDIA driver version (NVML), e.g. `580.159.04`.
    pub driver: Option<String>,
    /// The CUDA version the driver supports, e.g. `13.0`.
    pub cuda: String,
    pub cudnn: Option<String>,
    /// The CUDA runtime version cuDNN was built against.
    pub cudnn_cudart: Option<usize>,
    /// Every cuDNN library file mapped into the process at the end of the run.
    pub cudnn_files: Vec<String>,
    pub gpu_at_start: Option<GpuState>,
    pub gpu_at_end: Option<GpuState>,
}

impl RunInfo {
    pub fn collect(gpu: &Gpu, seed: u64) -> Result<Self> {
        let pci_bus_id = gpu.pci_bus_id()?;
        let nvml = Nvml::open(&pci_bus_id);
        let cuda = gpu.driver_version()?;
        let cudnn_version = cudnn::version();
        Ok(RunInfo {
            convkit: env!("CARGO_PKG_VERSION"),
            commit: COMMIT,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            seed,
            started: utc_now(),
            gpu: gpu.name()?,
            compute_capability: gpu.arch(),
            sm_count: gpu.sm_count(),
            kernels: match gpu.module_kind() {
                ModuleKind::Cubin => format!("sm_{} cubin", gpu.arch()),
                ModuleKind::Ptx => format!("sm_{} PTX (JIT)", gpu.ptx_arch()),
            },
            pci_bus_id,
            driver: nvml.as_ref().and_then(Nvml::driver_version),
            cuda: format!("{}.{}", cuda / 1000, cuda % 1000 / 10),
            cudnn: cudnn_version.map(|v| format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)),
            cudnn_cudart: cudnn_version.map(|_| cudarc::cudnn::result::get_cudart_version()),
            cudnn_files: cudnn::loaded_files(),
            gpu_at_start: nvml.as_ref().and_then(Nvml::state),
            gpu_at_end: None,
        })
    }

    /// Records the end of the run: clocks again, and the cuDNN files loaded meanwhile.
    pub fn finish(&mut self) {
        self.gpu_at_end = Nvml::open(&self.pci_bus_id).as_ref().and_then(Nvml::state);
        self.cudnn_files = cudnn::loaded_files();
    }

    /// The lines a table is headed with.
    pub fn header(&self) -> Vec<String> {
        let state = |s: &Option<GpuState>| {
            s.as_ref().map_or("not read (no NVML)".to_owned(), |s| {
                let mut text = format!("SM {}/{} MHz, memory {} MHz", s.sm_mhz, s.sm_max_mhz, s.mem_mhz);
                if let Some(t) = s.temperature_c {
                    text.push_str(&format!(", {t} C"));
                }
                if let Some(p) = s.power_w {
                    text.push_str(&format!(", {p:.0} W"));
                }
                if let Some(r) = s.clock_event_reasons {
                    text.push_str(&format!(", clock event reasons {r:#x}"));
                }
                text
            })
        };
        let main_file = self.cudnn_files.iter().find(|f| f.contains("libcudnn.so")).cloned();
        vec![
            format!(
                "convkit {} (commit {}), started {} UTC, seed {}",
                self.convkit, self.commit, self.started, self.seed
            ),
            format!("command: {}", self.command),
            format!(
                "GPU: {} (sm_{}, {} SMs, {}), driver {} (CUDA {}), kernels from {}",
                self.gpu,
                self.compute_capability,
                self.sm_count,
                self.pci_bus_id,
                self.driver.as_deref().unwrap_or("?"),
                self.cuda,
                self.kernels
            ),
            match &self.gpu_at_end {
                Some(_) => {
                    format!("clocks at start: {}; at end: {}", state(&self.gpu_at_start), state(&self.gpu_at_end))
                }
                None => format!("clocks: {}", state(&self.gpu_at_start)),
            },
            format!(
                "cuDNN {} (built for CUDA runtime {}) from {} ({} cuDNN files loaded)",
                self.cudnn.as_deref().unwrap_or("not found"),
                self.cudnn_cudart.map_or("?".to_owned(), |v| v.to_string()),
                main_file.as_deref().unwrap_or("?"),
                self.cudnn_files.len()
            ),
        ]
    }
}

/// Now, as `YYYY-MM-DDTHH:MM:SS` in UTC.
pub fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SS` (proleptic Gregorian calendar, UTC).
pub fn utc(unix_seconds: u64) -> String {
    let (days, rest) = ((unix_seconds / 86_400) as i64, unix_seconds % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}", rest / 3600, rest / 60 % 60, rest % 60)
}
