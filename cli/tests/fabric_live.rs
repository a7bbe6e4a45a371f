//! The GPUs' NVLink fabric registration read live from NVML (the fake NVML's `FAKE_FABRIC`)
//! and judged by the rule that judges `nvidia-smi -q`'s Fabric State offline: a registration
//! not completed is `fabric_manager_down` as in the field case NVIDIA/NVSentinel#883, an unhealthy
//! fabric warns, and a GPU without a fabric (NOT_SUPPORTED, PCIe) gives nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::process::Command;
use std::time::Duration;

use common::fake_gpu::FakeGpuLibs;
use common::{bin, code, output_within, stderr, stdout};

/// `ddpcheck ARGS --json` on the fake GPUs (two, copies at 26 GB/s) with these variables.
fn live(libs: &FakeGpuLibs, args: &[&str], env: &[(&str, &str)]) -> (i32, serde_json::Value) {
    let rt = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.args(args)
        .args(["--json", "--max-bytes", "16M"])
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON")
        .env_remove("FAKE_FABRIC")
        .env_remove("FAKE_FABRIC_API")
        .env("DDPCHECK_RUNTIME_DIR", rt.path())
        .env("FAKE_COPY_GBPS", "26")
        .envs(libs.env(true))
        .envs(env.iter().copied());
    let o = output_within(&mut cmd, Duration::from_secs(180));
    let r = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&o), stderr(&o)));
    (code(&o), r)
}

/// `ddpcheck explain --json` on the fake GPUs with these variables.
fn explain_live(libs: &FakeGpuLibs, env: &[(&str, &str)]) -> (i32, serde_json::Value) {
    live(libs, &["explain"], env)
}

/// The node's `fabric_manager_down` causes as (kind, action, severity); both reports, live and
/// from artifacts, carry node causes at the top.
fn fabric_causes(r: &serde_json::Value) -> Vec<(String, String, String)> {
    let text = |c: &serde_json::Value, k: &str| c[k].as_str().unwrap().to_string();
    r["causes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "fabric_manager_down")
        .map(|c| (text(c, "kind"), text(c, "action"), text(c, "severity")))
        .collect()
}

/// The cause the artifacts path gives the NVSentinel#883 node (Fabric State `In Progress`).
fn offline_cause() -> Vec<(String, String, String)> {
    let case = common::repo_root()
        .join("fixtures/field-cases/nvsentinel-883-h100-fabric-manager-down/artifacts");
    let o = Command::new(bin("ddpcheck"))
        .args(["explain", "--from-artifacts"])
        .arg(case)
        .arg("--json")
        .output()
        .unwrap();
    fabric_causes(&serde_json::from_slice(&o.stdout).unwrap())
}

#[test]
fn live_fabric_not_registered_is_the_cause_the_artifacts_give() {
    let Some(libs) = FakeGpuLibs::build() else {
        return;
    };
    let offline = offline_cause();
    assert_eq!(offline.len(), 1, "{offline:?}");
    // GPU 1 still registering (in progress) while GPU 0 completed; then both not started,
    // read through the oldest call (a driver without the V call: nvmlGpuFabricInfo_t only).
    for (env, not_registered) in [
        (&[("FAKE_FABRIC", "3/0,1=2")][..], 1),
        (&[("FAKE_FABRIC", "1"), ("FAKE_FABRIC_API", "v1")][..], 2),
    ] {
        let (rc, r) = explain_live(&libs, env);
        assert_eq!(fabric_causes(&r), offline, "{env:?}: {r}");
        assert_eq!(rc, 2, "{env:?}: {r}");
        let g = &r["platform"]["fabric"]["gpu_state"];
        assert_eq!(g["gpus_not_registered"], not_registered, "{g}");
        assert!(g["source"].as_str().unwrap().starts_with("NVML"), "{g}");
    }
}

#[test]
fn live_fabric_health_warns_and_no_fabric_is_nothing() {
    let Some(libs) = FakeGpuLibs::build() else {
        return;
    };
    // Registered with success, but NVML's health mask says the bandwidth is degraded (v2).
    let (rc, r) = explain_live(
        &libs,
        &[("FAKE_FABRIC", "3/0/1"), ("FAKE_FABRIC_API", "v2")],
    );
    assert_eq!(
        fabric_causes(&r),
        [(
            "fabric_manager_down".to_string(),
            "check_link".to_string(),
            "warning".to_string()
        )],
        "{r}"
    );
    assert_eq!(rc, 1, "{r}");
    assert_eq!(
        r["platform"]["fabric"]["gpu_state"]["health"][0],
        "bandwidth degraded"
    );

    // Healthy fabric (every health field false, configuration none): read, no cause.
    let healthy = (2 | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8)).to_string();
    let (_, r) = explain_live(&libs, &[("FAKE_FABRIC", &format!("3/0/{healthy}"))]);
    assert_eq!(fabric_causes(&r), [], "{r}");
    assert_eq!(r["platform"]["fabric"]["gpu_state"]["state"], "completed");

    // PCIe GPUs: NVML answers NOT_SUPPORTED, which is no fabric, never a fault.
    for env in [&[][..], &[("FAKE_FABRIC", "0")][..]] {
        let (rc, r) = explain_live(&libs, env);
        assert_eq!(fabric_causes(&r), [], "{env:?}: {r}");
        assert!(
            r["platform"]["fabric"].get("gpu_state").is_none(),
            "{env:?}: {r}"
        );
        assert_eq!(rc, 0, "{env:?}: {r}");
    }
}

/// `ddpcheck check --json` on the fake GPUs with these variables (`--gpus` as given).
fn check_live(libs: &FakeGpuLibs, gpus: &str, env: &[(&str, &str)]) -> (i32, serde_json::Value) {
    live(libs, &["check", "--gpus", gpus], env)
}

/// The preflight reads the registration from NVML before any CUDA work: not completed is
/// CRITICAL on one GPU (where no collective runs that would fail) as on two, and nothing of the
/// GPUs' work starts; a PCIe GPU's NOT_SUPPORTED is no fabric.
#[test]
fn check_reads_the_live_registration_before_any_gpu_work() {
    let Some(libs) = FakeGpuLibs::build() else {
        return;
    };
    for gpus in ["0", "0,1"] {
        let (rc, r) = check_live(&libs, gpus, &[("FAKE_FABRIC", "1")]);
        assert_eq!(
            (rc, r["verdict"].as_str()),
            (2, Some("CRITICAL")),
            "{gpus}: {r}"
        );
        assert!(
            r["reason"].as_str().unwrap().contains("Fabric Manager"),
            "{r}"
        );
        let steps = r["steps"].as_array().unwrap();
        let status = |n: &str| steps.iter().find(|s| s["name"] == n).unwrap()["status"].clone();
        assert_eq!(status("host_copies"), "skipped", "{gpus}: {r}");
        assert_eq!(status("all_reduce"), "skipped", "{gpus}: {r}");
    }
    let (rc, r) = check_live(&libs, "0", &[]);
    assert_eq!(rc, 0, "{r}");
    let steps = r["steps"].as_array().unwrap();
    let fabric = steps.iter().find(|s| s["name"] == "fabric").unwrap();
    assert_eq!(fabric["detail"], "no NVLink fabric", "{r}");
}
