//! A response body's framing, decoded incrementally: `Transfer-Encoding: chunked` (size lines,
//! extensions, trailers), `Content-Length`, or until close. Both HTTP/1.1 clients (the load
//! lanes' [`super::HttpConn`] and the fan-out followers') feed it whatever pieces the socket
//! returns; the body's bytes come out as slices of the input, never copied.

/// Why a chunked body cannot be decoded on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("a chunk size that overflows")]
    SizeOverflow,
    #[error("a bad chunk size byte {0:#04x}")]
    SizeByte(u8),
    #[error("a chunk size line without LF")]
    SizeLineLf,
    #[error("a chunk size line without a size")]
    NoSize,
    #[error("a chunk longer than its size")]
    TooLong,
    #[error("a chunk without CRLF after its data")]
    DataCrlf,
    #[error("a bad end of the chunked body")]
    BadEnd,
}

/// How a response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    Chunked,
    Length(u64),
    /// Neither: the body ends when the server closes.
    UntilClose,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Hex digits of a chunk size.
    Size,
    /// A chunk extension, skipped to the end of the line.
    Ext,
    /// The LF after the CR of a size line.
    SizeLf,
    Data,
    /// The CRLF after a chunk's data.
    DataCr,
    DataLf,
    /// A trailer line starts (an empty one ends the body).
    Trailer,
    TrailerSkip,
    TrailerLf,
    Done,
}

/// Decodes a response body incrementally from whatever pieces the socket returns, handing
/// out the body's bytes as slices of its input (nothing is copied).
#[derive(Clone, Debug)]
pub struct BodyDecoder {
    kind: BodyKind,
    state: Chunk,
    /// The chunk size being read (Size), or what is left of the chunk or body (Data, Length).
    n: u64,
    digits: u8,
}

impl BodyDecoder {
    pub fn new(kind: BodyKind) -> BodyDecoder {
        let (state, n) = match kind {
            BodyKind::Length(0) => (Chunk::Done, 0),
            BodyKind::Length(n) => (Chunk::Data, n),
            _ => (Chunk::Size, 0),
        };
        BodyDecoder {
            kind,
            state,
            n,
            digits: 0,
        }
    }

    /// Whether the whole body was read.
    pub fn done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Decode `input`, handing each run of body bytes to `out`. Bytes past the end of the body
    /// are ignored.
    pub fn feed<'a>(
        &mut self,
        mut input: &'a [u8],
        out: &mut impl FnMut(&'a [u8]),
    ) -> Result<(), ChunkError> {
        match self.kind {
            BodyKind::UntilClose => {
                if !input.is_empty() {
                    out(input);
                }
                return Ok(());
            }
            BodyKind::Length(_) => {
                if self.state == Chunk::Data && !input.is_empty() {
                    let n = input
                        .len()
                        .min(usize::try_from(self.n).unwrap_or(usize::MAX));
                    out(&input[..n]);
                    self.n -= n as u64;
                    if self.n == 0 {
                        self.state = Chunk::Done;
                    }
                }
                return Ok(());
            }
            BodyKind::Chunked => {}
        }
        while let Some(&b) = input.first() {
            match self.state {
                Chunk::Size => {
                    input = &input[1..];
                    match b {
                        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                            let v = (b as char).to_digit(16).unwrap_or(0);
                            self.n = self
                                .n
                                .checked_mul(16)
                                .and_then(|n| n.checked_add(u64::from(v)))
                                .ok_or(ChunkError::SizeOverflow)?;
                            self.digits = self.digits.saturating_add(1);
                        }
                        b';' | b' ' | b'\t' => self.state = Chunk::Ext,
                        b'\r' => self.state = Chunk::SizeLf,
                        b'\n' => self.end_size_line()?,
                        _ => return Err(ChunkError::SizeByte(b)),
                    }
                }
                Chunk::Ext => match memchr::memchr(b'\n', input) {
                    Some(i) => {
                        input = &input[i + 1..];
                        self.end_size_line()?;
                    }
                    None => input = &[],
                },
                Chunk::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError::SizeLineLf);
                    }
                    input = &input[1..];
                    self.end_size_line()?;
                }
                Chunk::Data => {
                    let n = input
                        .len()
                        .min(usize::try_from(self.n).unwrap_or(usize::MAX));
                    out(&input[..n]);
                    input = &input[n..];
                    self.n -= n as u64;
                    if self.n == 0 {
                        self.state = Chunk::DataCr;
                    }
                }
                Chunk::DataCr => {
                    input = &input[1..];
                    self.state = match b {
                        b'\r' => Chunk::DataLf,
                        b'\n' => Chunk::Size,
                        _ => return Err(ChunkError::TooLong),
                    };
                }
                Chunk::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError::DataCrlf);
                    }
                    input = &input[1..];
                    self.state = Chunk::Size;
                }
                Chunk::Trailer => {
                    input = &input[1..];
                    self.state = match b {
                        b'\r' => Chunk::TrailerLf,
                        b'\n' => Chunk::Done,
                        _ => Chunk::TrailerSkip,
                    };
                }
                Chunk::TrailerSkip => match memchr::memchr(b'\n', input) {
                    Some(i) => {
                        input = &input[i + 1..];
                        self.state = Chunk::Trailer;
                    }
                    None => input = &[],
                },
                Chunk::TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkError::BadEnd);
                    }
                    input = &input[1..];
                    self.state = Chunk::Done;
                }
                Chunk::Done => return Ok(()),
            }
        }
        Ok(())
    }

    fn end_size_line(&mut self) -> Result<(), ChunkError> {
        if self.digits == 0 {
            return Err(ChunkError::NoSize);
        }
        self.digits = 0;
        if self.n == 0 {
            self.state = Chunk::Trailer;
        } else {
            self.state = Chunk::Data;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(kind: BodyKind, pieces: &[&[u8]]) -> Result<(Vec<u8>, bool), ChunkError> {
        let mut d = BodyDecoder::new(kind);
        let mut out = Vec::new();
        for p in pieces {
            d.feed(p, &mut |s| out.extend_from_slice(s))?;
        }
        Ok((out, d.done()))
    }

    #[test]
    fn chunked_bodies_decode_from_any_split() {
        let body =
            b"5\r\nhello\r\n1;ext=1\r\n \r\nB\r\nworld, etc.\r\n0\r\nX-Trailer: 1\r\n\r\nextra";
        // Cut in two anywhere, and in pieces of 1 and 7 bytes.
        let halves = (0..=body.len()).map(|i| vec![&body[..i], &body[i..]]);
        let small = [1, 7].map(|n| body.chunks(n).collect::<Vec<_>>());
        for pieces in halves.chain(small) {
            assert_eq!(
                decode(BodyKind::Chunked, &pieces),
                Ok((b"hello world, etc.".to_vec(), true))
            );
        }
        // An unfinished body is not done; a body cut in a chunk is not either.
        assert_eq!(
            decode(BodyKind::Chunked, &[b"3\r\nabc\r\n"]),
            Ok((b"abc".to_vec(), false))
        );
        assert_eq!(
            decode(BodyKind::Chunked, &[b"0\r\n\r\n"]),
            Ok((Vec::new(), true))
        );
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"3\r\nabcd\r\n",
            b"ffffffffffffffffff\r\n",
        ] {
            assert!(decode(BodyKind::Chunked, &[bad]).is_err(), "{bad:?}");
        }
        assert_eq!(
            decode(BodyKind::Length(4), &[b"ab", b"cdef"]),
            Ok((b"abcd".to_vec(), true))
        );
        assert_eq!(decode(BodyKind::Length(0), &[b"x"]), Ok((Vec::new(), true)));
        assert_eq!(
            decode(BodyKind::UntilClose, &[b"ab", b"cd"]),
            Ok((b"abcd".to_vec(), false))
        );
    }
}
