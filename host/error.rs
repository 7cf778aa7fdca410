use cudarc::{cudnn::result::CudnnError, driver::DriverError};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every way a convkit call can fail. Messages are one line, meant for a user to act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no CUDA driver: could not load libcuda (is an NVIDIA driver installed?)")]
    NoDriver,
    #[error("no CUDA device: the driver reports {count} device(s) and ordinal {ordinal} was asked for")]
    NoDevice { ordinal: usize, count: usize },
    #[error(
        "unsupported GPU architecture sm_{device}: this build has PTX for {available} \
         (rebuild with CONVKIT_CUDA_ARCH=sm_{device})"
    )]
    UnsupportedArch { device: u32, available: String },
    #[error("library {lib} not found: {hint}")]
    LibraryNotFound { lib: &'static str, hint: &'static str },
    #[error("invalid shape: {field} {reason}")]
    InvalidShape { field: &'static str, reason: String },
    #[error("tile {tile} cannot compute this shape: {reason}")]
    UnsupportedTile { tile: &'static str, reason: &'static str },
    #[error("the {algorithm} algorithm cannot compute this shape: {reason}")]
    Unsupported { algorithm: &'static str, reason: String },
    #[error("buffer `{buffer}` holds {got} elements, the shape needs {expected}")]
    BufferSize { buffer: &'static str, expected: usize, got: usize },
    #[error("workspace too small: {needed} bytes needed, {given} given")]
    WorkspaceTooSmall { needed: usize, given: usize },
    #[error("out of GPU memory allocating {bytes} bytes")]
    OutOfMemory { bytes: usize },
    #[error("{what} belongs to another CUDA context than this Gpu")]
    ForeignContext { what: String },
    #[error("buffer `{buffer}` is not {align}-byte aligned, which {reason}")]
    Misaligned { buffer: &'static str, align: usize, reason: &'static str },
    #[error("timing: {0}")]
    Timing(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("CUDA call {call} failed: {source}")]
    Cuda { call: &'static str, source: DriverError },
    #[error("cuDNN call {call} failed: {source:?}")]
    Cudnn { call: &'static str, source: CudnnError },
    #[error("cuDNN: {0}")]
    CudnnUnsupported(String),
    #[cfg(feature = "harness")]
    #[error("cuBLAS call {call} failed: {source:?}")]
    Cublas { call: &'static str, source: cudarc::cublas::result::CublasError },
    #[cfg(feature = "harness")]
    #[error("cuFFT call {call} failed: {source:?}")]
    Cufft { call: &'static str, source: cudarc::cufft::result::CufftError },
    #[cfg(feature = "harness")]
    #[error("cuBLASLt call {call} failed: {source:?}")]
    CublasLt { call: &'static str, source: cudarc::cublaslt::result::CublasError },
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidShape { field, reason: reason.into() }
    }
}

/// Tags driver and cuDNN results with the call that produced them.
pub(crate) trait Context<T> {
    fn during(self, call: &'static str) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, DriverError> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|source| Error::Cuda { call, source })
    }
}

impl<T> Context<T> for std::result::Result<T, CudnnError> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|source| Error::Cudnn { call, source })
    }
}

#[cfg(feature = "harness")]
impl<T> Context<T> for std::result::Result<T, cudarc::cublas::result::CublasError> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|source| Error::Cublas { call, source })
    }
}

#[cfg(feature = "harness")]
impl<T> Context<T> for std::result::Result<T, cudarc::cublaslt::result::CublasError> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|source| Error::CublasLt { call, source })
    }
}

#[cfg(feature = "harness")]
impl<T> Context<T> for std::result::Result<T, cudarc::cufft::result::CufftError> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|source| Error::Cufft { call, source })
    }
}
