//! Framing: the 5-byte header in front of every frame (`u32` body length, then the type byte)
//! and the maximum frame size. The limit is checked on the length prefix alone, so a peer
//! cannot make a reader buffer — or even wait for — a body larger than it allows.

use super::wire::{Reader, put_u8, put_u32};
use super::{EncodeError, FrameError, FrameType};

/// Bytes of a frame header.
pub const HEAD_LEN: usize = 5;

/// A frame header: the body length (not counting these 5 bytes) and the type byte, which is
/// kept raw so that the caller decides what an unknown type means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub len: u32,
    pub ty: u8,
}

impl Head {
    /// The header at the front of `buf`, or `Ok(None)` while fewer than 5 bytes are there.
    /// A body length over `max` is [`FrameError::TooLarge`].
    pub fn parse(buf: &[u8], max: u32) -> Result<Option<Head>, FrameError> {
        let mut r = Reader::new(buf);
        let (Some(len), Some(ty)) = (r.u32(), r.u8()) else {
            return Ok(None);
        };
        if len > max {
            return Err(FrameError::TooLarge {
                len: u64::from(len),
                max: u64::from(max),
            });
        }
        Ok(Some(Head { len, ty }))
    }

    /// The known type, if it is one.
    pub fn frame_type(&self) -> Option<FrameType> {
        FrameType::from_u8(self.ty)
    }

    /// Header plus body.
    pub fn frame_len(&self) -> usize {
        HEAD_LEN + self.len as usize
    }
}

/// Start a frame of type `ty` in `out`; returns where it starts, for [`finish`].
pub(crate) fn begin(out: &mut Vec<u8>, ty: FrameType) -> usize {
    let start = out.len();
    put_u32(out, 0);
    put_u8(out, ty as u8);
    start
}

/// Patch the length of the frame begun at `start` now that its body is written.
pub(crate) fn finish(out: &mut Vec<u8>, start: usize) -> Result<(), EncodeError> {
    let body = out.len() - start - HEAD_LEN;
    let len = u32::try_from(body).map_err(|_| {
        out.truncate(start);
        EncodeError::FrameTooLarge {
            len: body as u64,
            max: u64::from(u32::MAX),
        }
    })?;
    if let Some(slot) = out.get_mut(start..start + 4) {
        slot.copy_from_slice(&len.to_le_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_until_five_bytes_and_limit_from_the_prefix() {
        assert_eq!(Head::parse(&[], 10), Ok(None));
        assert_eq!(Head::parse(&[3, 0, 0, 0], 10), Ok(None));
        assert_eq!(
            Head::parse(&[3, 0, 0, 0, 6, 99], 10),
            Ok(Some(Head { len: 3, ty: 6 }))
        );
        // Refused on the prefix alone, with none of the body present.
        assert_eq!(
            Head::parse(&[0xff, 0xff, 0xff, 0xff, 3], 1 << 20),
            Err(FrameError::TooLarge {
                len: u64::from(u32::MAX),
                max: 1 << 20
            })
        );
        assert_eq!(
            Head::parse(&[11, 0, 0, 0, 3], 10),
            Err(FrameError::TooLarge { len: 11, max: 10 })
        );
    }

    #[test]
    fn begin_and_finish_patch_the_length() {
        let mut out = vec![0xaa];
        let start = begin(&mut out, FrameType::Ping);
        out.extend_from_slice(&[1, 2, 3]);
        assert_eq!(finish(&mut out, start), Ok(()));
        assert_eq!(out, [0xaa, 3, 0, 0, 0, 6, 1, 2, 3]);
    }
}
