//! A real `ddpcheckd` never imports code a gRPC caller names: a model factory runs through the
//! daemon only from a folder its configuration allows (`factory_dirs`), none by default; library
//! models are allowed. The refusals are one line with the usage exit code, before any work.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, stderr, Daemon};

/// A factory that would leave a mark if it were ever imported.
fn factory_in(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let marker = dir.join("imported");
    let file = dir.join("factory.py");
    std::fs::write(
        &file,
        format!(
            "open({:?}, 'w').write('imported')\ndef make():\n    raise SystemExit('never')\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    (file, marker)
}

fn bench(d: &Daemon, model: &str) -> std::process::Output {
    d.cli(&[
        "bench",
        "ddp",
        "--model",
        model,
        "--gpus",
        "1",
        "--variants",
        "base",
    ])
}

#[test]
fn a_daemon_without_factory_dirs_refuses_every_factory_and_runs_none() {
    let d = Daemon::start(Some("h200x2-nvlink"));
    let dir = tempfile::tempdir().unwrap();
    let (file, marker) = factory_in(dir.path());
    let o = bench(&d, &format!("py:{}:make", file.display()));
    let err = stderr(&o);
    assert_eq!(code(&o), 64, "{err}");
    assert!(
        err.contains("runs no model factories (factory_dirs is unset"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let o = bench(&d, "py:some_package.models:make");
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("runs no module factories"),
        "{}",
        stderr(&o)
    );
    assert!(!marker.exists(), "the factory was imported");
    d.stop();
}

#[test]
fn a_daemon_runs_factories_only_inside_its_factory_dirs() {
    let allowed = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let (inside, _) = factory_in(allowed.path());
    let (outside, marker) = factory_in(elsewhere.path());
    let dirs = allowed.path().display().to_string();
    let d = Daemon::start_with(Some("h200x2-nvlink"), &["--factory-dirs", &dirs]);
    let o = bench(&d, &format!("py:{}:make", outside.display()));
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("outside the daemon's factory_dirs"),
        "{}",
        stderr(&o)
    );
    assert!(!marker.exists(), "the factory outside was imported");
    // Allowed: the request passes the policy and reaches the node, which here is simulated and
    // has no PyTorch (its own refusal, not the policy's).
    for model in [
        format!("py:{}:make", inside.display()),
        "torchvision:resnet50".into(),
    ] {
        let o = bench(&d, &model);
        assert!(
            stderr(&o).contains("a simulated node has no PyTorch"),
            "{model}: {}",
            stderr(&o)
        );
    }
    d.stop();
}

/// A caller that skips the CLI sends a model's fields as it likes: the daemon holds each field
/// to the bounds `--model` is read by and refuses the call before any work, as it refused such
/// text before models were typed; a factory outside `factory_dirs` is still refused unimported.
#[test]
fn a_daemon_refuses_model_fields_out_of_bounds_from_a_raw_call() {
    use ddpcheck_proto::v1::{self, model_choice, model_source::Kind as SourceKind};
    let dir = tempfile::tempdir().unwrap();
    let (file, marker) = factory_in(dir.path());
    let d = Daemon::start(Some("h200x2-nvlink"));
    let source = |kind| v1::ModelChoice {
        kind: Some(model_choice::Kind::Source(v1::ModelSource {
            kind: Some(kind),
        })),
    };
    let cases = [
        (
            source(SourceKind::Timm("../../etc/passwd".into())),
            tonic::Code::InvalidArgument,
            "not a model name",
        ),
        (
            source(SourceKind::Python(v1::PythonFactory {
                target: file.display().to_string(),
                function: "make()".into(),
            })),
            tonic::Code::InvalidArgument,
            "not a Python function name",
        ),
        (
            v1::ModelChoice {
                kind: Some(model_choice::Kind::Mlp(v1::Mlp {
                    width: 1 << 20,
                    depth: 4,
                    input: None,
                    output: None,
                })),
            },
            tonic::Code::InvalidArgument,
            "out of range",
        ),
        (
            source(SourceKind::Python(v1::PythonFactory {
                target: file.display().to_string(),
                function: "make".into(),
            })),
            tonic::Code::PermissionDenied,
            "runs no model factories",
        ),
        (
            source(SourceKind::HuggingFace(v1::HuggingFace {
                model_type: Some("llama".into()),
                overrides: vec![v1::ConfigOverride {
                    key: "hidden_size".into(),
                    value: "99999999999".into(),
                }],
                seq: 128,
                ..Default::default()
            })),
            tonic::Code::InvalidArgument,
            "outside",
        ),
    ];
    let socket = d.addr();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let mut c = ddpcheck_client::connect(&socket).await.unwrap();
        for (model, code, says) in cases {
            let req = v1::BenchDdpRequest {
                models: vec![model.clone()],
                variants: vec![v1::Variant::default()],
                world_sizes: vec![1],
                ..Default::default()
            };
            let Err(status) = c.bench_ddp(req).await else {
                panic!("{model:?} was accepted");
            };
            assert_eq!(status.code(), code, "{model:?}: {status:?}");
            assert!(status.message().contains(says), "{model:?}: {status:?}");
        }
    });
    assert!(!marker.exists(), "the factory was imported");
    d.stop();
}

/// A Hugging Face `config.json` is a file the daemon reads as its own user: it is held to the
/// factories' rule (inside `factory_dirs`, checked before any work), and a refused path gets the
/// same answer whether or not the file exists, so a call cannot probe the node's files.
#[test]
fn a_daemon_reads_hf_configs_only_inside_its_factory_dirs_and_tells_nothing_else() {
    use ddpcheck_proto::v1::{self, model_choice, model_source::Kind as SourceKind};
    let allowed = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let existing = elsewhere.path().join("config.json");
    std::fs::write(&existing, "{\"model_type\": \"llama\"}").unwrap();
    let missing = elsewhere.path().join("gone").join("config.json");
    let dirs = allowed.path().display().to_string();
    let hf = |path: &std::path::Path| v1::ModelChoice {
        kind: Some(model_choice::Kind::Source(v1::ModelSource {
            kind: Some(SourceKind::HuggingFace(v1::HuggingFace {
                config_path: Some(path.display().to_string()),
                seq: 128,
                ..Default::default()
            })),
        })),
    };
    for extra in [vec![], vec!["--factory-dirs", dirs.as_str()]] {
        let d = Daemon::start_with(Some("h200x2-nvlink"), &extra);
        let socket = d.addr();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let answers = runtime.block_on(async {
            let mut c = ddpcheck_client::connect(&socket).await.unwrap();
            let mut answers = Vec::new();
            for path in [&existing, &missing] {
                let req = v1::BenchDdpRequest {
                    models: vec![hf(path)],
                    variants: vec![v1::Variant::default()],
                    world_sizes: vec![1],
                    ..Default::default()
                };
                let Err(status) = c.bench_ddp(req).await else {
                    panic!("{} was accepted ({extra:?})", path.display());
                };
                assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
                let path = path.display().to_string();
                answers.push(status.message().replace(&path, "PATH"));
            }
            answers
        });
        assert_eq!(
            answers[0], answers[1],
            "{extra:?}: the answers tell the files apart"
        );
        d.stop();
    }
}
