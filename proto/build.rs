//! Compiles ddpcheck/v1/*.proto with protox (pure Rust), so a build needs no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "ddpcheck/v1/ddpcheck.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
