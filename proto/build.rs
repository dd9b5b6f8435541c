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
        "svcos/tuner/v1/power.proto",
        "svcos/tuner/v1/history.proto",
        "svcos/testpool/v1/testpool.proto",
        "svcos/config/v1/config.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    // The same descriptors for gRPC server reflection, without source info (comments and spans
    // are most of the bytes, and reflection clients do not need them).
    let mut reflection = fds.clone();
    for file in &mut reflection.file {
        file.source_code_info = None;
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    // Gzipped: a quarter of the bytes in the image, inflated once when reflection is first asked.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &prost::Message::encode_to_vec(&reflection))?;
    std::fs::write(out.join("svcos_descriptor_set.bin.gz"), gz.finish()?)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
