//! Compiles the IPC contract with protox (pure Rust), so a fresh machine needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "svcos/hwagent/v1/hwagent.proto",
        "svcos/hwagent/v1/diagnostics.proto",
        "svcos/hwsim/v1/hwsim.proto",
        "svcos/stratum/v1/stratum.proto",
        "svcos/auth/v1/auth.proto",
        "svcos/supervisor/v1/supervisor.proto",
        "svcos/supervisor/v1/update.proto",
        "svcos/tuner/v1/tuner.proto",
        "svcos/testpool/v1/testpool.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
