//! The snippet's environment lines: consumer nodes never force P2P, and disable it where it hangs.

use super::*;

/// The snippet's environment lines of `ddpcheck --sim SIM recommend --model gpt2-124m` under
/// `env`.
fn env_lines_on(sim: &str, env: &[(&str, &str)]) -> Vec<String> {
    let args = ["--sim", sim, "recommend", "--model", "gpt2-124m", "--json"];
    let o = local_env(&args, env);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn consumer_nodes_never_force_p2p_and_disable_it_where_it_hangs() {
    // NVML's policy is off (GPU_NOT_SUPPORTED): nothing to change, and the line says not to
    // force P2P, with why.
    let plain = env_lines_on("rtx4090x4-phb", &[]);
    assert!(
        plain[0].starts_with("# no NCCL environment change"),
        "{plain:?}"
    );
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("# leave NCCL_P2P_LEVEL unset")
                && l.contains("GPU_NOT_SUPPORTED")),
        "{plain:?}"
    );
    assert!(!plain.iter().any(|l| l.starts_with("export")), "{plain:?}");

    // P2P forced across the host bridge on cards where it hangs: unset it, saying why, and
    // disable P2P, marked unmeasured (no A/B ran).
    let forced = env_lines_on("rtx4090x4-phb+p2p-hang", &[("NCCL_P2P_LEVEL", "SYS")]);
    let unset = forced
        .iter()
        .find(|l| l.starts_with("unset NCCL_P2P_LEVEL"))
        .unwrap_or_else(|| panic!("{forced:?}"));
    assert!(
        unset.contains("never force P2P where NVML's policy is off"),
        "{unset}"
    );
    assert!(unset.contains("GPU_NOT_SUPPORTED"), "{unset}");
    let disable = forced
        .iter()
        .find(|l| l.starts_with("export NCCL_P2P_DISABLE=1"))
        .unwrap_or_else(|| panic!("{forced:?}"));
    assert!(
        disable.contains("hangs or returns wrong values"),
        "{disable}"
    );
    assert!(disable.contains("unmeasured on this node"), "{disable}");

    // A card whose NVML allows P2P over NVLink gets none of it.
    let nvlink = env_lines_on("rtx3090x2-nvlink", &[("NCCL_P2P_LEVEL", "SYS")]);
    assert!(
        !nvlink.iter().any(|l| l.contains("NCCL_P2P_DISABLE")),
        "{nvlink:?}"
    );
}
