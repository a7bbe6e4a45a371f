//! The NCCL environment a simulated run reports, as a real worker would run under it.

/// The environment a real worker would run under: this process's NCCL_* variables (a real
/// worker inherits them, and the report's provenance lists them), then the request's, the last
/// setting of each variable kept, sorted by name.
pub(crate) fn effective_env(env: &[(String, String)]) -> Vec<(String, String)> {
    let mut map: std::collections::BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect();
    for (k, v) in env {
        map.insert(k.clone(), v.clone());
    }
    map.into_iter().collect()
}
