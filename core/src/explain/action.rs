//! The recommended actions: a short, documented vocabulary (docs/explain.md), one per cause, in
//! the manner of NVIDIA Health Validation's recommended actions.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Nothing to do: the cause is a fact of the platform, told so the figures read right.
    None,
    /// Unset an NCCL variable (the cause names it).
    UnsetEnv,
    /// Set an NCCL variable to the value the cause names.
    SetEnv,
    /// Disable ACS redirection on the named bridges (BIOS, or `setpci` at boot).
    DisableAcs,
    /// Put the IOMMU in passthrough (`iommu=pt`) or off for the GPUs.
    IommuPassthrough,
    /// Check the PCIe or NVLink link: reseat, cable, slot, retrain; compare with a sister node.
    CheckLink,
    /// Reset the GPU (`nvidia-smi -r`) when it is idle.
    ResetGpu,
    /// Take the node out of service until it is repaired.
    Drain,
    /// Start NVIDIA Fabric Manager (`systemctl start nvidia-fabricmanager`).
    StartFabricManager,
    /// Disable MIG mode where the job needs whole GPUs talking to each other.
    DisableMig,
    /// Use GPUs of one NUMA node (or one PCIe switch) for the job.
    PickGpus,
    /// Ask the provider of the virtual machine for GPU P2P (the guest cannot change it).
    AskProvider,
    /// Nothing on this machine recovers the gap: it is the platform's nature; the cause says
    /// what kind of machine would do better (and cites the A/B where one ran).
    PlatformLimit,
    /// Change the driver setting the cause names (a registry key that turns P2P off).
    DriverSetting,
}

impl Action {
    pub const ALL: [Action; 14] = [
        Action::None,
        Action::UnsetEnv,
        Action::SetEnv,
        Action::DisableAcs,
        Action::IommuPassthrough,
        Action::CheckLink,
        Action::ResetGpu,
        Action::Drain,
        Action::StartFabricManager,
        Action::DisableMig,
        Action::PickGpus,
        Action::AskProvider,
        Action::PlatformLimit,
        Action::DriverSetting,
    ];

    /// The vocabulary's word (as JSON and the metric label carry it).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::UnsetEnv => "unset_env",
            Action::SetEnv => "set_env",
            Action::DisableAcs => "disable_acs",
            Action::IommuPassthrough => "iommu_passthrough",
            Action::CheckLink => "check_link",
            Action::ResetGpu => "reset_gpu",
            Action::Drain => "drain",
            Action::StartFabricManager => "start_fabric_manager",
            Action::DisableMig => "disable_mig",
            Action::PickGpus => "pick_gpus",
            Action::AskProvider => "ask_provider",
            Action::PlatformLimit => "platform_limit",
            Action::DriverSetting => "driver_setting",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
