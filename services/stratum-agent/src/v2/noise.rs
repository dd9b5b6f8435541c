//! The Noise NX transport under Stratum V2, on the reference crates (`noise_sv2` for the
//! handshake, `codec_sv2` for the encrypted framing): both roles' handshakes over a TCP stream,
//! then a reader and a writer of plaintext frames. Frames cross this boundary as the bytes of a
//! whole SV2 frame (header + payload), so the protocol cores above stay free of I/O.

use std::time::Duration;

use codec_sv2::{
    Decoded, Decrypted, Handshake, InitiatorSent, NoiseDecoder, NoiseEncoder,
    TransportDecryptState, TransportEncryptState,
};
use framing_sv2::framing::SerializedFrame;
use noise_sv2::{
    ELLSWIFT_ENCODING_SIZE, INITIATOR_EXPECTED_HANDSHAKE_MESSAGE_SIZE, Initiator, Responder,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why the encrypted transport failed.
#[derive(Debug, thiserror::Error)]
pub enum NoiseError {
    /// The socket failed or closed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The responder's certificate is not signed by the configured authority key (or is outside
    /// its validity window).
    #[error(
        "Noise handshake failed: the pool's certificate is not signed by authority key {0} (wrong key in the pool URL, or not this pool)"
    )]
    WrongAuthority(String),
    /// Any other handshake or decryption failure, as the reference codec words it.
    #[error("Noise {stage}: {detail}")]
    Codec {
        /// Handshake step or transport.
        stage: &'static str,
        /// The codec's error.
        detail: String,
    },
    /// The handshake did not finish in time.
    #[error("Noise handshake timed out")]
    Timeout,
}

fn codec(stage: &'static str, e: impl std::fmt::Debug) -> NoiseError {
    NoiseError::Codec {
        stage,
        detail: format!("{e:?}"),
    }
}

/// The encrypting half of an established session.
pub struct FrameWriter<W> {
    io: W,
    encoder: NoiseEncoder,
    state: TransportEncryptState,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Encrypt and write one plaintext frame (header + payload).
    pub async fn send(&mut self, frame: &[u8]) -> Result<(), NoiseError> {
        let frame = SerializedFrame::from_bytes(frame.to_vec())
            .map_err(|e| codec("encode", format!("not one frame: {e}")))?;
        let bytes = self
            .encoder
            .encode_transport(frame, &mut self.state)
            .map_err(|e| codec("encrypt", e))?;
        self.io.write_all(bytes.as_ref()).await?;
        self.io.flush().await?;
        Ok(())
    }
}

/// The decrypting half of an established session.
pub struct FrameReader<R> {
    io: R,
    decoder: NoiseDecoder,
    state: Option<TransportDecryptState>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Read and decrypt the next frame. Not cancel-safe: run it in a task of its own.
    pub async fn next(&mut self) -> Result<Vec<u8>, NoiseError> {
        loop {
            let buf = self.decoder.writable();
            if !buf.is_empty() {
                self.io.read_exact(buf).await?;
            }
            // A failed decryption consumes the state: the session cannot continue after it.
            let state = self
                .state
                .take()
                .ok_or_else(|| codec("transport", "session already failed"))?;
            match self
                .decoder
                .next_transport_frame(state)
                .map_err(|e| codec("decrypt", e))?
            {
                Decrypted::Frame(frame, state) => {
                    self.state = Some(state);
                    return Ok(frame.as_bytes().to_vec());
                }
                Decrypted::Incomplete(_, state) => self.state = Some(state),
            }
        }
    }
}

/// An established session's two halves.
pub type Halves<R, W> = (FrameReader<R>, FrameWriter<W>);

async fn read_handshake<R: AsyncRead + Unpin, S: codec_sv2::ExpectsHandshakeMessage>(
    io: &mut R,
    decoder: &mut NoiseDecoder,
) -> Result<Vec<u8>, NoiseError> {
    loop {
        match decoder
            .next_handshake_frame::<S>()
            .map_err(|e| codec("handshake read", e))?
        {
            Decoded::Frame(m) => return Ok(m.payload().to_vec()),
            Decoded::Incomplete(_) => {
                let buf = decoder.writable();
                io.read_exact(buf).await?;
            }
        }
    }
}

/// Run the initiator side (the miner). `authority` is the pool's authority public key (x-only,
/// 32 bytes); its base58 form is only used in the error.
pub async fn initiate<R, W>(
    mut read: R,
    mut write: W,
    authority: [u8; 32],
    authority_b58: &str,
    timeout: Duration,
) -> Result<Halves<R, W>, NoiseError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let run = async {
        let initiator = Initiator::from_raw_k(authority).map_err(|e| codec("authority key", e))?;
        let (first, sent) = Handshake::initiator(initiator)
            .step_0()
            .map_err(|e| codec("handshake act 1", e))?;
        let mut encoder = NoiseEncoder::new();
        write
            .write_all(encoder.encode_handshake(first).as_ref())
            .await?;
        write.flush().await?;
        let mut decoder = NoiseDecoder::new();
        let reply = read_handshake::<R, InitiatorSent>(&mut read, &mut decoder).await?;
        let reply: [u8; INITIATOR_EXPECTED_HANDSHAKE_MESSAGE_SIZE] = reply
            .try_into()
            .map_err(|_| codec("handshake act 2", "short message"))?;
        let transport = sent.step_2(reply).map_err(|e| match e {
            codec_sv2::Error::NoiseSv2Error(noise_sv2::Error::InvalidCertificate(_)) => {
                NoiseError::WrongAuthority(authority_b58.to_string())
            }
            other => codec("handshake act 2", other),
        })?;
        let (enc, dec) = transport.split();
        Ok((
            FrameReader {
                io: read,
                decoder,
                state: Some(dec),
            },
            FrameWriter {
                io: write,
                encoder,
                state: enc,
            },
        ))
    };
    tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| NoiseError::Timeout)?
}

/// Run the responder side (the pool) with its authority keypair; certificates are valid for
/// `cert_validity`.
pub async fn respond<R, W>(
    mut read: R,
    mut write: W,
    authority_public: &[u8; 32],
    authority_secret: &[u8; 32],
    cert_validity: Duration,
    timeout: Duration,
) -> Result<Halves<R, W>, NoiseError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let run = async {
        let responder =
            Responder::from_authority_kp(authority_public, authority_secret, cert_validity)
                .map_err(|e| codec("authority keypair", e))?;
        let mut decoder = NoiseDecoder::new();
        let first = read_handshake::<R, Responder>(&mut read, &mut decoder).await?;
        let first: [u8; ELLSWIFT_ENCODING_SIZE] = first
            .try_into()
            .map_err(|_| codec("handshake act 1", "short message"))?;
        let (reply, transport) = Handshake::responder(responder)
            .step_1(first)
            .map_err(|e| codec("handshake act 2", e))?;
        let mut encoder = NoiseEncoder::new();
        write
            .write_all(encoder.encode_handshake(reply).as_ref())
            .await?;
        write.flush().await?;
        let (enc, dec) = transport.split();
        Ok((
            FrameReader {
                io: read,
                decoder,
                state: Some(dec),
            },
            FrameWriter {
                io: write,
                encoder,
                state: enc,
            },
        ))
    };
    tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| NoiseError::Timeout)?
}
