//! NVML functions nvml-wrapper 0.11 does not wrap (remapped rows, NVLink remote device type; the
//! fabric's in `fabric`),
//! looked up by name in the already loaded libnvidia-ml.so.1; a missing symbol is an error, not a panic.
//!
//! nvml-wrapper-sys's own methods for these `expect()` the symbol, so we never call them.

use std::ffi::{c_uint, c_void};

use libloading::Library;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Device;

type RemappedRowsFn =
    unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut c_uint, *mut c_uint, *mut c_uint) -> c_uint;
type RemoteDeviceTypeFn = unsafe extern "C" fn(*mut c_void, c_uint, *mut c_uint) -> c_uint;

/// Row remapping state (`nvidia-smi -q -d ROW_REMAPPER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

/// A second handle on libnvidia-ml.so.1, opened after nvml-wrapper loaded and initialised it.
pub struct Extra {
    lib: Option<Library>,
}

/// An NVML return code as nvml-wrapper's error (the codes we meet here; nvml.h's values).
pub fn nvml_code(code: c_uint) -> Result<(), NvmlError> {
    match code {
        0 => Ok(()),
        1 => Err(NvmlError::Uninitialized),
        2 => Err(NvmlError::InvalidArg),
        3 => Err(NvmlError::NotSupported),
        4 => Err(NvmlError::NoPermission),
        15 => Err(NvmlError::GpuLost),
        _ => Err(NvmlError::Unknown),
    }
}

impl Extra {
    pub fn open() -> Extra {
        // SAFETY: this is NVIDIA's NVML, which nvml-wrapper has already loaded and initialised in
        // this process; dlopen only takes another reference, no initialiser runs again.
        let lib = unsafe { Library::new("libnvidia-ml.so.1") }.ok();
        Extra { lib }
    }

    #[cfg(test)]
    pub fn none() -> Extra {
        Extra { lib: None }
    }

    pub(super) fn symbol<T: Copy>(&self, name: &'static [u8]) -> Result<T, NvmlError> {
        let missing = || {
            NvmlError::FailedToLoadSymbol(
                String::from_utf8_lossy(name).trim_end_matches('\0').into(),
            )
        };
        let lib = self.lib.as_ref().ok_or_else(missing)?;
        // SAFETY: T is the C signature of `name` in nvml.h (the callers below fix it); the
        // function pointer is copied out while `lib` stays open for as long as `self` lives.
        unsafe { lib.get::<T>(name).map(|s| *s).map_err(|_| missing()) }
    }

    /// `nvmlDeviceGetRemappedRows` (Ampere and newer).
    pub fn remapped_rows(&self, device: &Device<'_>) -> Result<RemappedRows, NvmlError> {
        let f: RemappedRowsFn = self.symbol(b"nvmlDeviceGetRemappedRows\0")?;
        let (mut corr, mut unc, mut pending, mut failure) = (0, 0, 0, 0);
        // SAFETY: a valid device handle of the live NVML session and four out-pointers to locals.
        let code = unsafe {
            f(
                device.handle() as *mut c_void,
                &mut corr,
                &mut unc,
                &mut pending,
                &mut failure,
            )
        };
        nvml_code(code)?;
        Ok(RemappedRows {
            correctable: corr,
            uncorrectable: unc,
            pending: pending != 0,
            failure: failure != 0,
        })
    }

    /// `nvmlDeviceGetNvLinkRemoteDeviceType`: 0 GPU, 1 IBM NPU, 2 NVSwitch, 255 unknown.
    pub fn nvlink_remote_type(&self, device: &Device<'_>, link: u32) -> Result<u32, NvmlError> {
        let f: RemoteDeviceTypeFn = self.symbol(b"nvmlDeviceGetNvLinkRemoteDeviceType\0")?;
        let mut kind: c_uint = 255;
        // SAFETY: a valid device handle of the live NVML session, a link index and an out-pointer.
        let code = unsafe { f(device.handle() as *mut c_void, link, &mut kind) };
        nvml_code(code)?;
        Ok(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_codes_map_to_errors() {
        assert!(nvml_code(0).is_ok());
        assert!(matches!(nvml_code(3), Err(NvmlError::NotSupported)));
        assert!(matches!(nvml_code(15), Err(NvmlError::GpuLost)));
        assert!(matches!(nvml_code(999), Err(NvmlError::Unknown)));
    }

    #[test]
    fn missing_library_is_an_error_not_a_panic() {
        let e = Extra::none();
        match e.symbol::<RemoteDeviceTypeFn>(b"nvmlDeviceGetNvLinkRemoteDeviceType\0") {
            Err(NvmlError::FailedToLoadSymbol(name)) => {
                assert_eq!(name, "nvmlDeviceGetNvLinkRemoteDeviceType")
            }
            other => panic!("expected a missing symbol, got {:?}", other.map(|_| ())),
        }
    }
}
