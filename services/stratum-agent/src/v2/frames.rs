//! SV2 frames as plain bytes ↔ the reference crates' owned message types (`parsers_sv2`), and
//! the 256-bit target arithmetic both roles share. Pure functions: what the fuzz target drives.

use framing_sv2::framing::{EncodableFrame, MessageFrame};
use framing_sv2::header::Header;
use parsers_sv2::{
    AnyMessage, AnyMessageOwned, CommonMessageTypes, CommonMessages, IsSv2Message, Mining,
    MiningTypes, ParserError,
};

/// Why a frame could not be built or read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrameError {
    /// Not one whole frame, or a header the framing layer refuses.
    #[error("bad frame: {0}")]
    Framing(String),
    /// The payload is not the message its header names.
    #[error("bad {kind} payload: {detail}")]
    Payload {
        /// Message type name.
        kind: &'static str,
        /// The parser's error.
        detail: String,
    },
    /// A well-formed header naming a message a mining client never receives (Job Declaration,
    /// Template Distribution, an extension); the session logs it and carries on.
    #[error("unexpected {0}")]
    Unexpected(&'static str),
}

/// Encode one message as a plaintext frame (header + payload).
pub fn encode(message: AnyMessageOwned) -> Result<Vec<u8>, FrameError> {
    let frame = MessageFrame::<AnyMessageOwned>::try_from(message)
        .map_err(|e| FrameError::Framing(format!("{e:?}")))?;
    let mut buf = vec![0; frame.encoded_length()];
    frame
        .encode_into(&mut buf)
        .map_err(|e| FrameError::Framing(format!("{e:?}")))?;
    Ok(buf)
}

/// The message type byte and name of a frame, if its header is readable.
pub fn kind(frame: &[u8]) -> Option<(u8, &'static str)> {
    let h = Header::from_bytes(frame).ok()?;
    Some((
        h.msg_type(),
        parsers_sv2::message_type_to_name(h.msg_type()),
    ))
}

/// Decode one plaintext frame into an owned message.
///
/// Only the Common and Mining protocols are parsed: the pool side of a mining channel sends
/// nothing else, and going through `AnyMessage`'s own dispatch would link the Job Declaration
/// and Template Distribution parsers (~70 KiB) into the image for messages that are refused
/// anyway (docs/PERFORMANCE.md, issue 15).
pub fn decode(frame: &[u8]) -> Result<AnyMessageOwned, FrameError> {
    decode_with(frame, |t, payload| {
        MiningTypes::try_from(t)
            .is_ok()
            .then(|| Mining::try_from((t, payload)).map(AnyMessage::Mining))
    })
}

/// Check a plaintext frame's header against its length and parse it: Common messages here,
/// any other protocol by `parse` (`None`: a message type this path does not take), so each
/// role links only the parsers of the protocols it speaks.
pub fn decode_with(
    frame: &[u8],
    parse: impl for<'a> FnOnce(u8, &'a mut [u8]) -> Option<Result<AnyMessage<'a>, ParserError>>,
) -> Result<AnyMessageOwned, FrameError> {
    let header = Header::from_bytes(frame).map_err(|e| FrameError::Framing(format!("{e:?}")))?;
    let len = Header::SIZE + header.payload_length();
    if frame.len() != len {
        return Err(FrameError::Framing(format!(
            "frame is {} bytes, its header says {len}",
            frame.len()
        )));
    }
    let msg_type = header.msg_type();
    let kind = parsers_sv2::message_type_to_name(msg_type);
    let standard = header.ext_type_without_channel_msg() == 0;
    let mut payload = frame[Header::SIZE..].to_vec();
    let payload = payload.as_mut_slice();
    let message = if !standard {
        return Err(FrameError::Unexpected(kind));
    } else if CommonMessageTypes::try_from(msg_type).is_ok() {
        CommonMessages::try_from((msg_type, payload)).map(AnyMessage::Common)
    } else if let Some(parsed) = parse(msg_type, payload) {
        parsed
    } else {
        return Err(FrameError::Unexpected(kind));
    };
    let message = message.map_err(|e| FrameError::Payload {
        kind,
        detail: format!("{e:?}"),
    })?;
    Ok(message.into_owned())
}

/// The message type name of an owned message.
pub fn name(message: &AnyMessageOwned) -> &'static str {
    parsers_sv2::message_type_to_name(message.message_type())
}

/// A one-line summary for the message log (the crates' own Display, capped).
pub fn summary(message: &AnyMessageOwned) -> String {
    let mut s = message.to_string();
    if s.len() > 240 {
        let mut cut = 240;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

// Targets and difficulties are Bitcoin arithmetic: svcos_work's (rust-bitcoin's definitions),
// the same conversions the V1 path and the test pool use.
pub use svcos_work::{
    hash_difficulty as target_to_difficulty, meets_target,
    target_from_difficulty as difficulty_to_target,
};

#[cfg(test)]
mod tests {
    use super::*;
    use common_messages_sv2::SetupConnectionSuccess;
    use parsers_sv2::CommonMessagesOwned;

    #[test]
    fn frames_round_trip_through_the_reference_parser() {
        let m = AnyMessageOwned::Common(CommonMessagesOwned::SetupConnectionSuccess(
            SetupConnectionSuccess {
                used_version: 2,
                flags: 0b110,
            },
        ));
        let bytes = encode(m.clone()).unwrap();
        assert_eq!(kind(&bytes), Some((0x01, "SetupConnectionSuccess")));
        assert_eq!(decode(&bytes).unwrap().to_string(), m.to_string());
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[]).is_err());
    }

    #[test]
    fn messages_a_client_never_receives_are_unexpected_not_parsed() {
        // A Template Distribution NewTemplate header (type 0x71) with an empty payload, and a
        // Mining type under a non-zero extension: refused by name before any payload parsing.
        for (ext, msg_type) in [(0u16, 0x71u8), (0x0002, 0x1f)] {
            let mut frame = ext.to_le_bytes().to_vec();
            frame.push(msg_type);
            frame.extend_from_slice(&[0, 0, 0]);
            let name = parsers_sv2::message_type_to_name(msg_type);
            assert!(matches!(decode(&frame), Err(FrameError::Unexpected(n)) if n == name));
        }
    }

    #[test]
    fn targets_and_difficulties_agree() {
        for d in [0.0001, 0.5, 1.0, 1024.0, 1e12] {
            let t = difficulty_to_target(d);
            let back = target_to_difficulty(&t);
            assert!((back - d).abs() / d < 1e-9, "{d} -> {back}");
        }
        // Difficulty 1 is 0x00000000ffff0000… in big-endian terms.
        let t = difficulty_to_target(1.0);
        assert_eq!(&t[26..], &[0xff, 0xff, 0, 0, 0, 0]);
        assert!(meets_target(&t, &t));
        let mut above = t;
        above[0] = 1;
        assert!(!meets_target(&above, &t));
        assert!(!meets_target(&[0xff; 32], &t));
        assert!(meets_target(&[0; 32], &t));
    }
}
