//! The IPC contract of svcOS: one gRPC package per service (`svcos.<service>.v1`).
//!
//! Every service serves its package on a Unix socket in the runtime directory; see
//! `svcos_common::ipc` for the transport. Enums start at `*_UNSPECIFIED = 0` and units are in the
//! field names, so a reader never has to guess.

#![allow(clippy::all, missing_docs)]

macro_rules! package {
    ($name:ident, $path:literal) => {
        pub mod $name {
            pub mod v1 {
                tonic::include_proto!($path);
            }
        }
    };
}

package!(hwagent, "svcos.hwagent.v1");
package!(hwsim, "svcos.hwsim.v1");
package!(stratum, "svcos.stratum.v1");
package!(auth, "svcos.auth.v1");
package!(supervisor, "svcos.supervisor.v1");
package!(tuner, "svcos.tuner.v1");
package!(testpool, "svcos.testpool.v1");
package!(config, "svcos.config.v1");

/// Every package above as an encoded `FileDescriptorSet` (without source info), for gRPC server
/// reflection. The image carries it gzipped; it is inflated on the first call and kept.
pub fn file_descriptor_set() -> &'static [u8] {
    use std::io::Read;
    static GZ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/svcos_descriptor_set.bin.gz"));
    static SET: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
        let mut set = Vec::new();
        flate2::read::GzDecoder::new(GZ)
            .read_to_end(&mut set)
            .expect("build.rs wrote a whole gzip stream");
        set
    });
    &SET
}
