//! Which NCCL_* and CUDA_* variables a caller may set through the daemon: those that tune
//! transports and algorithms, listed here by name. A variable that names a library, a plugin, a
//! file or a path would have the daemon's worker load, read or write what the caller chose, so it
//! passes only where the daemon's own configuration allows it by name (`allow_env`). The local
//! CLI runs as its caller and passes what it is given; this list is the daemon's alone.

/// One variable a caller may set through the daemon, and what it tunes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunable {
    pub name: &'static str,
    pub tunes: &'static str,
}

const fn t(name: &'static str, tunes: &'static str) -> Tunable {
    Tunable { name, tunes }
}

/// The variables a caller may set through the daemon (`--env`, `--env-ab`); each value only
/// chooses among the node's own transports, devices and sizes. Names and meanings follow NCCL's
/// and CUDA's documentation of their environment variables.
pub const TUNABLE: &[Tunable] = &[
    t(
        "NCCL_P2P_DISABLE",
        "turns the P2P transport (NVLink, PCIe) off",
    ),
    t("NCCL_P2P_LEVEL", "the longest path P2P is used across"),
    t(
        "NCCL_P2P_DIRECT_DISABLE",
        "P2P through one process's own address space off",
    ),
    t(
        "NCCL_P2P_NET_CHUNKSIZE",
        "chunk size of P2P over the network",
    ),
    t("NCCL_SHM_DISABLE", "turns the shared-memory transport off"),
    t(
        "NCCL_SHM_USE_CUDA_MEMCPY",
        "shared-memory copies by the copy engine",
    ),
    t(
        "NCCL_IB_DISABLE",
        "turns InfiniBand/RoCE off (sockets instead)",
    ),
    t("NCCL_IB_HCA", "which of the node's HCAs and ports IB uses"),
    t(
        "NCCL_NET_GDR_LEVEL",
        "the longest path GPU Direct RDMA is used across",
    ),
    t("NCCL_NET_GDR_READ", "GPU Direct RDMA for sends"),
    t("NCCL_CROSS_NIC", "whether rings and trees may cross NICs"),
    t(
        "NCCL_SOCKET_IFNAME",
        "which of the node's interfaces sockets use",
    ),
    t("NCCL_SOCKET_NTHREADS", "threads of the socket transport"),
    t(
        "NCCL_NSOCKS_PERTHREAD",
        "sockets per thread of the socket transport",
    ),
    t(
        "NCCL_ALGO",
        "the algorithms collectives may use (Ring, Tree, ...)",
    ),
    t(
        "NCCL_PROTO",
        "the protocols collectives may use (LL, LL128, Simple)",
    ),
    t("NCCL_MIN_NCHANNELS", "the fewest channels"),
    t("NCCL_MAX_NCHANNELS", "the most channels"),
    t("NCCL_MIN_CTAS", "the fewest CTAs (channels, NCCL 2.17 on)"),
    t("NCCL_MAX_CTAS", "the most CTAs (channels, NCCL 2.17 on)"),
    t("NCCL_BUFFSIZE", "the buffer size between pairs of ranks"),
    t("NCCL_NTHREADS", "CUDA threads per block"),
    t("NCCL_NVLS_ENABLE", "NVLink SHARP on NVSwitch systems"),
    t("NCCL_NVB_DISABLE", "P2P through an intermediate GPU off"),
    t("NCCL_PXN_DISABLE", "sends through another GPU's NIC off"),
    t("NCCL_CUMEM_ENABLE", "cuMem* allocations for NCCL's buffers"),
    t("NCCL_DMABUF_ENABLE", "DMA-BUF for GPU Direct RDMA"),
    t(
        "NCCL_IGNORE_CPU_AFFINITY",
        "the job's CPU affinity ignored for the GPU's",
    ),
    t(
        "NCCL_DEBUG",
        "the log level (to the worker's standard error)",
    ),
    t("NCCL_DEBUG_SUBSYS", "which subsystems log"),
    t(
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "hardware work queues per device",
    ),
    t("CUDA_LAUNCH_BLOCKING", "synchronous kernel launches"),
    t("CUDA_MODULE_LOADING", "lazy or eager loading of kernels"),
];

/// The longest value a caller may give a variable through the daemon.
pub const MAX_VALUE_LEN: usize = 256;

/// Whether `name` is on [`TUNABLE`].
pub fn is_tunable(name: &str) -> bool {
    TUNABLE.iter().any(|t| t.name == name)
}

/// Whether `name` is an NCCL_* or CUDA_* variable's name (upper-case letters, digits and `_`),
/// the form an operator's `allow_env` entry must have.
pub fn is_variable_name(name: &str) -> bool {
    (name.starts_with("NCCL_") || name.starts_with("CUDA_"))
        && name.len() > 5
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether the name says the variable points at code or a file (`NCCL_NET_PLUGIN`,
/// `NCCL_TOPO_FILE`, `CUDA_INJECTION64_PATH`): the refusal says so.
fn names_code_or_path(name: &str) -> bool {
    ["_PLUGIN", "_FILE", "_PATH", "_DIR", "_LIB"]
        .iter()
        .any(|s| name.ends_with(s))
        || name.contains("INJECTION")
}

/// What allowing `name` (`allow_env`) lets every caller of the daemon do, where that is more
/// than tuning: the variable names a library, a plugin, a file or a path. The daemon says it
/// once at start; `None` for other names.
pub fn allowance_warning(name: &str) -> Option<String> {
    // NCCL_NET picks a network plugin by name.
    (names_code_or_path(name) || name == "NCCL_NET").then(|| {
        format!(
            "allow_env names {name}, which names a library, a plugin, a file or a path: any caller of the daemon may now have its workers load, read or write the file it names there, as the daemon's user"
        )
    })
}

/// Why the daemon refuses a caller's variable (the daemon answers it as permission denied).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallerEnvError {
    /// Neither tunable nor allowed by the operator; `names_code` when it names a library, a
    /// plugin, a file or a path.
    #[error("{name}: the daemon does not pass this variable from a caller ({}); run without --daemon, or ask the operator to allow it by name (allow_env)", why_not(*names_code))]
    NotPassed { name: String, names_code: bool },
    /// A value too long or with control characters.
    #[error("{name}: a value of at most {MAX_VALUE_LEN} printable characters, please")]
    Value { name: String },
}

fn why_not(names_code: bool) -> &'static str {
    if names_code {
        "it names a library, a plugin, a file or a path"
    } else {
        "it is not one of the transport and algorithm settings a caller may set"
    }
}

/// `Ok` when a caller may set every variable of `vars` through the daemon: each is on
/// [`TUNABLE`] or on the operator's `allowed` list, with a value of at most [`MAX_VALUE_LEN`]
/// printable characters. Else the one line that says why not.
pub fn check<'a>(
    vars: impl IntoIterator<Item = &'a (String, String)>,
    allowed: &[String],
) -> Result<(), CallerEnvError> {
    for (name, value) in vars {
        if !(is_tunable(name) || allowed.iter().any(|a| a == name)) {
            return Err(CallerEnvError::NotPassed {
                name: name.clone(),
                names_code: names_code_or_path(name),
            });
        }
        if value.len() > MAX_VALUE_LEN || value.chars().any(char::is_control) {
            return Err(CallerEnvError::Value { name: name.clone() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn variables_that_name_code_or_files_are_refused() {
        for name in [
            "NCCL_NET_PLUGIN",
            "NCCL_TUNER_PLUGIN",
            "NCCL_PROFILER_PLUGIN",
            "CUDA_INJECTION64_PATH",
            "NCCL_DEBUG_FILE",
            "NCCL_TOPO_FILE",
            "NCCL_GRAPH_FILE",
            "NCCL_CONF_FILE",
        ] {
            let e = check(&vars(&[(name, "/dev/shm/x.so")]), &[])
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(name), "{e}");
            assert!(
                e.contains("names a library, a plugin, a file or a path"),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn what_is_not_listed_is_refused_too() {
        for name in [
            "NCCL_COMM_ID",
            "CUDA_VISIBLE_DEVICES",
            "NCCL_NET",
            "NCCL_SOMETHING_NEW",
        ] {
            let e = check(&vars(&[(name, "x")]), &[]).unwrap_err().to_string();
            assert!(
                e.contains("not one of the transport and algorithm settings"),
                "{e}"
            );
        }
    }

    #[test]
    fn tuning_variables_pass_and_the_operator_may_allow_more_by_name() {
        let tuning = vars(&[("NCCL_P2P_LEVEL", "SYS"), ("NCCL_ALGO", "Ring")]);
        assert_eq!(check(&tuning, &[]), Ok(()));
        let topo = vars(&[("NCCL_TOPO_FILE", "/etc/nccl/topo.xml")]);
        assert!(check(&topo, &[]).is_err());
        assert_eq!(check(&topo, &["NCCL_TOPO_FILE".into()]), Ok(()));
        // By name only: allowing one file variable allows no other.
        let graph = vars(&[("NCCL_GRAPH_FILE", "/tmp/g.xml")]);
        assert!(check(&graph, &["NCCL_TOPO_FILE".into()]).is_err());
    }

    #[test]
    fn values_are_short_and_printable() {
        assert!(check(&vars(&[("NCCL_ALGO", "Ring\nTree")]), &[]).is_err());
        let long = "R".repeat(MAX_VALUE_LEN + 1);
        assert!(check(&vars(&[("NCCL_ALGO", &long)]), &[]).is_err());
    }

    #[test]
    fn the_list_holds_no_variable_that_names_code_or_a_path() {
        for t in TUNABLE {
            assert!(is_variable_name(t.name), "{}", t.name);
            assert!(!names_code_or_path(t.name), "{}", t.name);
        }
    }

    #[test]
    fn allowing_code_or_a_file_is_warned_and_tuning_is_not() {
        for name in ["NCCL_NET_PLUGIN", "NCCL_TOPO_FILE", "CUDA_INJECTION64_PATH"] {
            let w = allowance_warning(name).unwrap();
            assert!(w.contains(name) && w.contains("load"), "{w}");
        }
        assert!(allowance_warning("NCCL_NET").is_some());
        assert_eq!(allowance_warning("NCCL_IB_TIMEOUT"), None);
        assert_eq!(allowance_warning("NCCL_ALGO"), None);
    }

    #[test]
    fn operator_names_are_variable_names() {
        assert!(is_variable_name("NCCL_TOPO_FILE"));
        for bad in ["LD_PRELOAD", "NCCL_", "nccl_algo", "NCCL_A=B", "PYTHONPATH"] {
            assert!(!is_variable_name(bad), "{bad}");
        }
    }
}
