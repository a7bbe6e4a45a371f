//! The `BenchDdp` call's typed recipe on an in-process daemon over a simulated node: the
//! variants, the recipe, the device and the reference reach the run as sent, and an enum value
//! the daemon does not know is INVALID_ARGUMENT naming the field, before any work.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use ddpcheck_core::ddp::{DdpRequest, ModelSpec, Reference};
use ddpcheck_core::report::DdpReport;
use ddpcheck_proto::v1::ddpcheck_client::DdpcheckClient;
use ddpcheck_proto::v1::{self, work_event, BenchDdpRequest};
use ddpcheck_sim::SimBackend;
use ddpcheckd::run::{self, DaemonConfig, Running};
use tonic::transport::Channel;

async fn daemon(spec: &str, dir: &std::path::Path) -> (Running, DdpcheckClient<Channel>) {
    let backend = std::sync::Arc::new(SimBackend::parse(spec).unwrap());
    let running = run::start(DaemonConfig::in_dir(dir), backend)
        .await
        .unwrap();
    let client = ddpcheck_client::connect(&running.socket.display().to_string())
        .await
        .unwrap();
    (running, client)
}

/// The call's report, or the status it ended with.
async fn bench_ddp(
    c: &mut DdpcheckClient<Channel>,
    req: BenchDdpRequest,
) -> Result<DdpReport, tonic::Status> {
    let mut stream = c.bench_ddp(req).await?.into_inner();
    while let Some(ev) = stream.message().await? {
        if let Some(work_event::Event::Report(r)) = ev.event {
            return Ok(serde_json::from_str(&r.json).unwrap());
        }
    }
    panic!("the stream ended without a report");
}

/// A small request as the CLI builds it: an MLP at one and two GPUs, a hooked variant under
/// its own NCCL variable, eager DDP options set away from torch's defaults.
fn the_request() -> DdpRequest {
    let mut hooked: ddpcheck_core::ddp::DdpVariant = "powersgd4+accum2".parse().unwrap();
    hooked.env = vec![("NCCL_ALGO".into(), "Ring".into())];
    DdpRequest {
        models: vec![ModelSpec::square_mlp(256, 2)],
        variants: vec!["bucket10+nobucketview".parse().unwrap(), hooked],
        world_sizes: vec![1, 2],
        micro_batch: 8,
        warmup_steps: 1,
        steps: 2,
        min_timed_s: 0.0,
        price_per_gpu_hour: None,
        env: Vec::new(),
        deadline_s: 60.0,
        repeats: 1,
        recipe: ddpcheck_core::ddp::Recipe {
            amp: ddpcheck_core::ddp::Amp::None,
            find_unused_parameters: true,
            static_graph: true,
            gradient_as_bucket_view: true,
            broadcast_buffers: false,
            compile: None,
            backend: ddpcheck_core::ddp::Backend::Gloo,
        },
        device: ddpcheck_core::ddp::RunDevice::Cuda,
        reference: Reference::Ddp,
    }
}

/// [`the_request`] as the CLI sends it.
fn a_request() -> BenchDdpRequest {
    BenchDdpRequest::from(&the_request())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_recipe_reaches_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_running, mut c) = daemon("h200x2-nvlink", dir.path()).await;
    let want = the_request();
    let r = bench_ddp(&mut c, a_request()).await.unwrap();
    let variants: std::collections::BTreeSet<&str> =
        r.results.iter().map(|x| x.variant.as_str()).collect();
    // The hooked variant's 1-GPU reference is added by the run, under its environment.
    let expected = ["accum2", "bucket10+nobucketview", "powersgd4+accum2"];
    assert_eq!(variants.into_iter().collect::<Vec<_>>(), expected);
    for row in &r.results {
        assert_eq!(row.recipe.as_ref(), Some(&want.recipe), "{}", row.variant);
        assert_eq!(row.reference, Reference::Ddp, "{}", row.variant);
        assert!(row.plain_reference.is_none(), "{}", row.variant);
    }
}

/// A change made to a good request.
type Edit = fn(&mut BenchDdpRequest);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_enum_value_is_invalid_argument_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let (_running, mut c) = daemon("h200x2-nvlink", dir.path()).await;
    let cases: [(&str, Edit); 5] = [
        ("recipe.amp", |r| r.recipe.as_mut().unwrap().amp = 7),
        ("recipe.compile", |r| r.recipe.as_mut().unwrap().compile = 7),
        ("device", |r| r.device = 7),
        ("reference", |r| r.reference = 7),
        ("variants[1].wrapper", |r| r.variants[1].wrapper = 7),
    ];
    for (field, edit) in cases {
        let mut req = a_request();
        edit(&mut req);
        let e = bench_ddp(&mut c, req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{field}: {e:?}");
        assert!(
            e.message()
                .starts_with(&format!("{field}: unknown value 7")),
            "{field}: {}",
            e.message()
        );
    }
    // Parts that cannot run together are refused as their text form is, naming the variant.
    let mut req = a_request();
    req.variants[0].wrapper = v1::Wrapper::Fsdp.into();
    req.variants[0].hook = v1::CommHook::Fp16.into();
    let e = bench_ddp(&mut c, req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("variants[0]: "), "{}", e.message());
    // A variant's own environment crosses the wire: a variable the daemon does not pass from
    // callers, set on one variant only, is refused by name.
    let mut req = a_request();
    req.variants[0]
        .env
        .insert("NCCL_NET_PLUGIN".into(), "/tmp/x.so".into());
    let e = bench_ddp(&mut c, req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().starts_with("NCCL_NET_PLUGIN"),
        "{}",
        e.message()
    );
    // The daemon goes on answering: the request as sent runs.
    assert!(bench_ddp(&mut c, a_request()).await.is_ok());
}
