//! Which model factories a gRPC caller may have the daemon run. `ddpcheckd` runs as a service:
//! it never imports code a caller names unless the file lies in a folder its configuration
//! allows (`factory_dirs`, none by default). Library models (torchvision, timm, Hugging Face
//! configurations) run library code only and are always allowed; a module name is never run,
//! since the interpreter's search path, not the configuration, would say which file it is.

use std::path::{Path, PathBuf};

use ddpcheck_core::ddp::{DdpRequest, ModelSource};

/// `Ok` when every factory the request names is a file inside one of `allowed` (symbolic links
/// and `..` resolved first); else the one line that says why not.
pub fn check(req: &DdpRequest, allowed: &[PathBuf]) -> Result<(), String> {
    for source in req.models.iter().filter_map(|m| m.source()) {
        let ModelSource::Python { target, .. } = source else {
            continue;
        };
        let Some(file) = source.factory_file() else {
            return Err(format!(
                "{source}: this daemon runs no module factories; name a .py file inside its factory_dirs, or run the factory locally (ddpcheck bench ddp without --daemon)"
            ));
        };
        if allowed.is_empty() {
            return Err(format!(
                "{source}: this daemon runs no model factories (factory_dirs is unset in its configuration); run it locally, or ask the operator to allow its folder"
            ));
        }
        let resolved = std::fs::canonicalize(file)
            .map_err(|e| format!("{source}: factory file {target}: {e}"))?;
        if !allowed.iter().any(|dir| inside(&resolved, dir)) {
            return Err(format!(
                "{source}: {} is outside the daemon's factory_dirs ({})",
                resolved.display(),
                allowed
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ));
        }
    }
    Ok(())
}

fn inside(file: &Path, dir: &Path) -> bool {
    std::fs::canonicalize(dir).is_ok_and(|d| file.starts_with(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_core::ddp::ModelSpec;

    fn req(models: &[&str]) -> DdpRequest {
        DdpRequest {
            models: models.iter().map(|m| m.parse().unwrap()).collect(),
            variants: vec!["base".parse().unwrap()],
            world_sizes: vec![1],
            micro_batch: 8,
            warmup_steps: 1,
            steps: 2,
            min_timed_s: 0.0,
            price_per_gpu_hour: None,
            env: Vec::new(),
            deadline_s: 60.0,
            repeats: 1,
            recipe: Default::default(),
            device: Default::default(),
            plain_reference: false,
        }
    }

    #[test]
    fn library_models_and_presets_are_always_allowed() {
        let r = req(&[
            "torchvision:resnet50",
            "timm:vit_base_patch16_224",
            "hf:llama",
            "gpt2-124m",
        ]);
        assert_eq!(check(&r, &[]), Ok(()));
    }

    #[test]
    fn factories_run_only_from_allowed_folders() {
        let allowed = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        for dir in [allowed.path(), other.path()] {
            std::fs::write(dir.join("f.py"), "def make():\n    pass\n").unwrap();
        }
        let inside = format!("py:{}/f.py:make", allowed.path().display());
        let outside = format!("py:{}/f.py:make", other.path().display());
        let dirs = vec![allowed.path().to_path_buf()];
        assert_eq!(check(&req(&[&inside]), &dirs), Ok(()));
        let e = check(&req(&[&outside]), &dirs).unwrap_err();
        assert!(e.contains("outside the daemon's factory_dirs"), "{e}");
        let e = check(&req(&[&inside]), &[]).unwrap_err();
        assert!(e.contains("factory_dirs is unset"), "{e}");
        // `..` out of the allowed folder is resolved before the check.
        let escape = format!(
            "py:{}/../{}/f.py:make",
            allowed.path().display(),
            other.path().file_name().unwrap().to_str().unwrap()
        );
        assert!(ModelSpec::External {
            source: ModelSource::parse(&escape).unwrap().unwrap()
        }
        .source()
        .is_some());
        assert!(check(&req(&[&escape]), &dirs).is_err());
    }

    #[test]
    fn module_factories_are_never_run() {
        let dir = tempfile::tempdir().unwrap();
        let e = check(&req(&["py:mypkg.models:make"]), &[dir.path().to_path_buf()]).unwrap_err();
        assert!(e.contains("runs no module factories"), "{e}");
    }
}
