//! Each GPU's NVLink fabric registration from NVML, the live reading of `nvidia-smi -q`'s
//! Fabric State: `nvmlDeviceGetGpuFabricInfoV` (v3, else v2, with the health mask), else
//! `nvmlDeviceGetGpuFabricInfo`; NOT_SUPPORTED (PCIe GPUs, older drivers) is no fabric.
//!
//! The layouts and constants are nvml.h's (`nvmlGpuFabricInfo_t`, `_v2_t`, `_v3_t`,
//! `NVML_GPU_FABRIC_STATE_*`, `NVML_GPU_FABRIC_HEALTH_MASK_*`, `NVML_STRUCT_VERSION`).

use std::ffi::{c_uint, c_void};
use std::mem::{offset_of, size_of};

use ddpcheck_core::explain::platform::{FabricState, GpuFabricState};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Device;

use super::ffi::{nvml_code, Extra};

/// nvml.h's NVML_GPU_FABRIC_UUID_LEN.
const UUID_LEN: usize = 16;
/// nvmlReturn_t's NVML_ERROR_FUNCTION_NOT_FOUND and NVML_ERROR_ARGUMENT_VERSION_MISMATCH.
const FUNCTION_NOT_FOUND: c_uint = 13;
const VERSION_MISMATCH: c_uint = 25;

/// `nvmlGpuFabricInfo_t` (no version field, no health).
#[repr(C)]
#[derive(Default)]
struct InfoV1 {
    cluster_uuid: [u8; UUID_LEN],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
}

/// `nvmlGpuFabricInfo_v3_t`; `_v2_t` is the same without `healthSummary` (its size is this
/// one's offset of that field).
#[repr(C)]
#[derive(Default)]
struct InfoV3 {
    version: c_uint,
    cluster_uuid: [u8; UUID_LEN],
    status: c_uint,
    clique_id: c_uint,
    state: u8,
    health_mask: c_uint,
    health_summary: u8,
}

const V2_SIZE: usize = offset_of!(InfoV3, health_summary);
const _: () = assert!(size_of::<InfoV1>() == 28 && V2_SIZE == 36 && size_of::<InfoV3>() == 40);

/// `NVML_STRUCT_VERSION(GpuFabricInfo, ver)`: the struct's size (asserted above) with the version
/// in the top byte.
const V2_TAG: c_uint = 36 | (2 << 24);
const V3_TAG: c_uint = 40 | (3 << 24);

type InfoVFn = unsafe extern "C" fn(*mut c_void, *mut InfoV3) -> c_uint;
type InfoV1Fn = unsafe extern "C" fn(*mut c_void, *mut InfoV1) -> c_uint;

/// One GPU's answer as NVML gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// `NVML_GPU_FABRIC_STATE_*`: 0 not supported, 1 not started, 2 in progress, 3 completed.
    pub state: u8,
    /// An nvmlReturn_t, meaningful only once the state is completed.
    pub status: c_uint,
    /// The health mask (v2 and v3).
    pub health_mask: Option<c_uint>,
    /// `NVML_GPU_FABRIC_HEALTH_SUMMARY_*` (v3).
    pub health_summary: Option<u8>,
}

impl Extra {
    /// The GPU's fabric registration; `NotSupported` where it has no fabric.
    pub fn gpu_fabric(&self, device: &Device<'_>) -> Result<Reading, NvmlError> {
        // SAFETY: the raw handle of a device of the live NVML session, passed only to NVML.
        let handle = unsafe { device.handle() } as *mut c_void;
        if let Ok(f) = self.symbol::<InfoVFn>(b"nvmlDeviceGetGpuFabricInfoV\0") {
            for tag in [V3_TAG, V2_TAG] {
                let mut info = InfoV3 {
                    version: tag,
                    ..InfoV3::default()
                };
                // SAFETY: a valid device handle of the live NVML session and a buffer of the
                // size the version word names (v2's is a prefix of v3's).
                let code = unsafe { f(handle, &mut info) };
                match code {
                    VERSION_MISMATCH => continue,
                    FUNCTION_NOT_FOUND => break,
                    _ => nvml_code(code)?,
                }
                return Ok(Reading {
                    state: info.state,
                    status: info.status,
                    health_mask: Some(info.health_mask),
                    health_summary: (tag == V3_TAG).then_some(info.health_summary),
                });
            }
        }
        let f: InfoV1Fn = self.symbol(b"nvmlDeviceGetGpuFabricInfo\0")?;
        let mut info = InfoV1::default();
        // SAFETY: a valid device handle of the live NVML session and an nvmlGpuFabricInfo_t.
        nvml_code(unsafe { f(handle, &mut info) })?;
        Ok(Reading {
            state: info.state,
            status: info.status,
            health_mask: None,
            health_summary: None,
        })
    }
}

/// The reading as core's fact; `None` where the GPU has no fabric (state not supported, or a
/// state this build does not know).
pub fn to_state(r: &Reading) -> Option<GpuFabricState> {
    let state = match r.state {
        1 => FabricState::NotStarted,
        2 => FabricState::InProgress,
        3 => FabricState::Completed,
        other => {
            if other != 0 {
                tracing::debug!(state = other, "unknown NVML fabric state");
            }
            return None;
        }
    };
    // nvml.h: the status "must be checked only if state returns complete".
    let status = (state == FabricState::Completed).then(|| status_words(r.status));
    let mut g = GpuFabricState::of_gpu(state, status, "NVML: nvmlDeviceGetGpuFabricInfo");
    g.health = health_issues(r.health_mask.unwrap_or(0), r.health_summary.unwrap_or(0));
    Some(g)
}

/// `Success` as `nvidia-smi -q` writes it, else NVML's words for the error.
fn status_words(status: c_uint) -> String {
    match nvml_wrapper::error::nvml_try(status) {
        Ok(()) => "Success".into(),
        Err(e) => format!("{e} (NVML return {status})"),
    }
}

/// The health mask's fields (`NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*` and `_WIDTH_*`) that report a
/// problem, in words, and the v3 summary where nothing more specific is set.
pub fn health_issues(mask: c_uint, summary: u8) -> Vec<String> {
    let field = |shift: u32, width: c_uint| (mask >> shift) & width;
    let mut out: Vec<String> = [
        (0, "bandwidth degraded"),
        (2, "route recovery in progress"),
        (4, "route unhealthy"),
        (6, "access timeout recovery in progress"),
    ]
    .into_iter()
    // Two bits each: 0 not supported, 1 true, 2 false.
    .filter(|&(shift, _)| field(shift, 0x3) == 1)
    .map(|(_, words)| words.to_string())
    .collect();
    match field(8, 0xf) {
        0 | 1 => {}
        2 => out.push("incorrect configuration: system GUID".into()),
        3 => out.push("incorrect configuration: chassis serial number".into()),
        4 => out.push("incorrect configuration: no partition".into()),
        5 => out.push("incorrect configuration: insufficient NVLinks".into()),
        other => out.push(format!("incorrect configuration (code {other})")),
    }
    if out.is_empty() {
        match summary {
            2 => out.push("unhealthy".into()),
            3 => out.push("limited capacity".into()),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_words_are_nvml_struct_version() {
        // sizeof(the struct) | version << 24, from this build's layouts.
        assert_eq!(V2_TAG as usize, V2_SIZE | (2 << 24));
        assert_eq!(V3_TAG as usize, size_of::<InfoV3>() | (3 << 24));
    }

    #[test]
    fn states_map_and_not_supported_is_no_fabric() {
        let r = |state, status| Reading {
            state,
            status,
            health_mask: None,
            health_summary: None,
        };
        assert_eq!(to_state(&r(0, 0)), None);
        assert_eq!(to_state(&r(7, 0)), None);
        let s = to_state(&r(2, 999)).unwrap();
        assert_eq!((s.state, s.status), (FabricState::InProgress, None));
        let s = to_state(&r(3, 0)).unwrap();
        assert_eq!(s.status.as_deref(), Some("Success"));
        assert!(s.registered());
        let s = to_state(&r(3, 999)).unwrap();
        assert!(!s.registered(), "{:?}", s.status);
    }

    #[test]
    fn health_mask_fields_in_words() {
        // Every field false (2) and the configuration "none" (1): healthy.
        let healthy = 2 | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8);
        assert_eq!(health_issues(healthy, 1), Vec::<String>::new());
        assert_eq!(health_issues(0, 0), Vec::<String>::new());
        assert_eq!(health_issues(1, 2), ["bandwidth degraded"]);
        assert_eq!(
            health_issues((1 << 4) | (5 << 8), 2),
            [
                "route unhealthy",
                "incorrect configuration: insufficient NVLinks"
            ]
        );
        assert_eq!(health_issues(healthy, 3), ["limited capacity"]);
    }
}
