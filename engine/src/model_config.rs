//! A model spec from a Hugging Face `config.json` file, for `--model-config`: a missing or
//! unreadable file and a config ddpcheck cannot build are usage errors (exit 64).

use std::path::Path;

use ddpcheck_core::bounded::FileKind;
use ddpcheck_core::ddp::{from_hf_config, ModelSpec};

use crate::RunError;

pub fn read_model_config(path: &Path) -> Result<ModelSpec, RunError> {
    let failed = |e: String| RunError::Usage(format!("--model-config {}: {e}", path.display()));
    let text = crate::read_file(path, FileKind::Config).map_err(|e| failed(e.to_string()))?;
    from_hf_config(&text).map_err(|e| failed(e.to_string()))
}
