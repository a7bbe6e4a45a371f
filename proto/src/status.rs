//! A failed run's `ProbeError` across the API: the daemon sends it beside the gRPC status, so
//! the CLI gives the same words and exit code through the daemon as locally (TIMEOUT is 5
//! both ways, a failed GPU 2, an interrupted run 3; docs/exit-codes.md).

use ddpcheck_core::ProbeError;
use tonic::metadata::{BinaryMetadataValue, MetadataMap};
use tonic::{Code, Status};

/// Trailer that carries the error as JSON (binary metadata: messages are not ASCII).
pub const PROBE_ERROR_KEY: &str = "ddpcheck-probe-error-bin";

/// The gRPC code that reads right to any client: deadline exceeded for a timeout, aborted
/// for an interrupted run, the refusals as before, internal for the rest.
pub fn code_of(e: &ProbeError) -> Code {
    match e {
        ProbeError::Invalid(_) => Code::InvalidArgument,
        ProbeError::Busy(_) => Code::ResourceExhausted,
        ProbeError::Timeout { .. } => Code::DeadlineExceeded,
        ProbeError::Interrupted(_) => Code::Aborted,
        ProbeError::Unavailable(_) | ProbeError::GpuFailed(_) | ProbeError::Worker(_) => {
            Code::Internal
        }
    }
}

/// `e` as a status with `code`, the error itself in [`PROBE_ERROR_KEY`].
pub fn status_with(code: Code, e: &ProbeError) -> Status {
    let mut meta = MetadataMap::new();
    // A ProbeError always serialises (strings and a float); without it the code still holds.
    if let Ok(json) = serde_json::to_vec(e) {
        meta.insert_bin(PROBE_ERROR_KEY, BinaryMetadataValue::from_bytes(&json));
    }
    Status::with_metadata(code, e.to_string(), meta)
}

/// [`status_with`] with the code of [`code_of`].
pub fn status_of(e: &ProbeError) -> Status {
    status_with(code_of(e), e)
}

/// The error a daemon sent with `s`, where it sent one (older daemons did not).
pub fn probe_error_of(s: &Status) -> Option<ProbeError> {
    let bytes = s.metadata().get_bin(PROBE_ERROR_KEY)?.to_bytes().ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_error_comes_back_as_it_was_sent() {
        let all = [
            ProbeError::Unavailable("no driver ↔".into()),
            ProbeError::Busy("BUSY: x".into()),
            ProbeError::Timeout {
                stage: "ddp benchmark".into(),
                seconds: 2.0,
            },
            ProbeError::GpuFailed("GPU fell off the bus".into()),
            ProbeError::Worker("worker died".into()),
            ProbeError::Invalid("bad".into()),
            ProbeError::Interrupted("ddpcheckd is stopping".into()),
        ];
        for e in all {
            let s = status_of(&e);
            assert_eq!(s.message(), e.to_string());
            assert_eq!(probe_error_of(&s), Some(e));
        }
        assert_eq!(probe_error_of(&Status::internal("plain")), None);
    }
}
