//! The `content` target: `Content-Encoding: gzip` and `zstd` request bodies through vx-ingest's
//! decompression ([`Decoded`], then [`decode_encoded_body`], which adds the body limit), with a
//! small `ingest.max_body_bytes`. The decoders are async; a current-thread tokio runtime per
//! fuzzing thread drives them.
//!
//! # Input layout
//! `[mode][limit][cut][rest…]`:
//! - `mode` bit 0: gzip (0) or zstd (1); bit 1: `rest` is the compressed body as is (1), or the
//!   content that the target compresses itself (0), repeated 2^(bits 2–5) times (at most
//!   [`MAX_CONTENT`] bytes), so that valid streams and decompression bombs are reached too.
//! - `limit`: `max_body_bytes` = 64 × (`limit` + 1): 64 B to 16 KiB.
//! - `cut`: the compressed body arrives in chunks of `cut` bytes (0: one chunk).

use std::cell::RefCell;
use std::convert::Infallible;
use std::io::Write;

use bytes::Bytes;
use tokio::runtime::Runtime;
use vx_ingest::encoding::{CHUNK_BYTES, Decoded};
use vx_ingest::{
    Encoding, Format, InflightBudget, IngestError, LIMIT_BODY_BYTES, Limits, decode_encoded_body,
};
use vx_proto::ErrorClass;

use crate::NOW;

/// Largest content the target compresses itself (its repeats included).
const MAX_CONTENT: usize = 64 << 10;
/// Compressed bodies beyond this are skipped (the limit refuses them after 16 KiB anyway).
const MAX_INPUT: usize = 1 << 20;

thread_local! {
    static RT: RefCell<Option<Runtime>> = const { RefCell::new(None) };
}

/// Run `f` to completion on this thread's runtime.
fn block_on<F: Future>(f: F) -> F::Output {
    RT.with(|rt| {
        let mut rt = rt.borrow_mut();
        if rt.is_none() {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => *rt = Some(r),
                Err(e) => panic!("cannot build a tokio runtime: {e}"),
            }
        }
        match rt.as_ref() {
            Some(r) => r.block_on(f),
            None => unreachable!("built above"),
        }
    })
}

/// One fuzz input, unpacked.
#[derive(Debug)]
struct Case {
    encoding: Encoding,
    max_body_bytes: u64,
    cut: usize,
    /// The compressed body.
    body: Vec<u8>,
    /// What `body` decompresses to, when the target compressed it itself.
    content: Option<Vec<u8>>,
}

fn compress(encoding: Encoding, content: &[u8]) -> Vec<u8> {
    let out = match encoding {
        Encoding::Zstd => zstd::encode_all(content, 1),
        _ => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(content).and_then(|()| e.finish())
        }
    };
    match out {
        Ok(out) => out,
        Err(e) => panic!("compressing {} bytes failed: {e}", content.len()),
    }
}

fn case(data: &[u8]) -> Option<Case> {
    let [mode, limit, cut, rest @ ..] = data else {
        return None;
    };
    if rest.len() > MAX_INPUT {
        return None;
    }
    let encoding = if mode & 1 == 0 {
        Encoding::Gzip
    } else {
        Encoding::Zstd
    };
    let (body, content) = if mode & 2 != 0 {
        (rest.to_vec(), None)
    } else {
        let repeat = 1usize << ((mode >> 2) & 15);
        let repeat = repeat.min(MAX_CONTENT / rest.len().max(1)).max(1);
        let content = rest.repeat(repeat);
        (compress(encoding, &content), Some(content))
    };
    Some(Case {
        encoding,
        max_body_bytes: 64 * (u64::from(*limit) + 1),
        cut: usize::from(*cut),
        body,
        content,
    })
}

/// The compressed body as the stream of chunks a request body would be.
fn chunks(
    body: &[u8],
    cut: usize,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Unpin {
    let parts: Vec<Result<Bytes, Infallible>> = if cut == 0 {
        vec![Ok(Bytes::copy_from_slice(body))]
    } else {
        body.chunks(cut)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect()
    };
    futures_util::stream::iter(parts)
}

/// How pulling the decompressed body ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum End {
    /// The whole body, within the limit.
    Complete,
    /// Over the limit: more than `max_body_bytes` came out (the reader stops there, as the
    /// ingest body reader does), or the compressed body itself is over it.
    TooLarge,
    /// Bad compressed data (400).
    Malformed,
}

/// Pull the decompressed body chunk by chunk, like the ingest body reader: stop once more
/// than `max_body_bytes` came out. Every chunk is at most [`CHUNK_BYTES`], so what is held
/// is at most the limit plus one chunk.
fn pull(c: &Case, cut: usize) -> (Vec<u8>, End) {
    block_on(async {
        let mut d = Decoded::new(chunks(&c.body, cut), c.encoding, c.max_body_bytes);
        let mut out = Vec::new();
        loop {
            match d.next().await {
                Ok(None) => return (out, End::Complete),
                Ok(Some(chunk)) => {
                    assert!(
                        !chunk.is_empty() && chunk.len() <= CHUNK_BYTES,
                        "{c:?}: a decompressed chunk of {} bytes",
                        chunk.len()
                    );
                    out.extend_from_slice(&chunk);
                    if out.len() as u64 > c.max_body_bytes {
                        return (out, End::TooLarge);
                    }
                }
                Err(IngestError::Input(e)) if e.class == ErrorClass::TooLarge => {
                    assert_eq!(e.limit.as_deref(), Some(LIMIT_BODY_BYTES), "{c:?}: {e:?}");
                    assert!(c.body.len() as u64 > c.max_body_bytes, "{c:?}: {e:?}");
                    return (out, End::TooLarge);
                }
                Err(IngestError::Input(e)) if e.class == ErrorClass::Malformed => {
                    return (out, End::Malformed);
                }
                Err(e) => panic!("{c:?}: decompression failed with {e:?}, not a 400 or 413"),
            }
        }
    })
}

/// Decompressing any bytes never panics, never holds more than the limit plus one chunk, and
/// gives the same bytes whatever the compressed body's chunking; a body the target compressed
/// itself comes out exactly (or is refused as too large, if it or its content is over the
/// limit); the whole ingest path answers a 400 or 413 class of error or a batch, and a batch
/// only for a body within the limit.
pub fn content_is_bounded(data: &[u8]) {
    let Some(c) = case(data) else {
        return;
    };
    let (whole, whole_end) = pull(&c, 0);
    let (chunked, chunked_end) = pull(&c, c.cut);
    let bound = c.max_body_bytes as usize + CHUNK_BYTES;
    assert!(whole.len() <= bound && chunked.len() <= bound, "{c:?}");
    // Both runs see the same stream: what came out of both agrees, and a body that decodes
    // whole in one chunking does so in the other. (Two failures may differ in kind: bad data
    // that follows more than the limit of good output is "too large" when the good output
    // arrives in a read of its own, "malformed" when it arrives with the bad data.)
    let common = whole.len().min(chunked.len());
    assert!(
        whole[..common] == chunked[..common],
        "{c:?}: the output differs between one chunk and chunks of {}",
        c.cut
    );
    assert_eq!(
        whole_end == End::Complete,
        chunked_end == End::Complete,
        "{c:?}: one chunk ends {whole_end:?}, chunks of {} end {chunked_end:?}",
        c.cut
    );
    if whole_end == End::Complete {
        assert_eq!(whole, chunked, "{c:?}");
    }
    if let Some(content) = &c.content {
        let over =
            content.len() as u64 > c.max_body_bytes || c.body.len() as u64 > c.max_body_bytes;
        let want = if over { End::TooLarge } else { End::Complete };
        for (out, end) in [(&whole, &whole_end), (&chunked, &chunked_end)] {
            assert_eq!(end, &want, "{c:?}: {} bytes of content", content.len());
            assert!(
                content.starts_with(out),
                "{c:?}: the output is not the content"
            );
        }
    }
    let limits = Limits {
        max_body_bytes: c.max_body_bytes,
        max_event_bytes: 64 << 10,
        ..Limits::default()
    };
    let budget = InflightBudget::new(1 << 30);
    let got = block_on(decode_encoded_body(
        chunks(&c.body, c.cut),
        Format::Ndjson,
        c.encoding,
        &limits,
        &budget,
        NOW,
    ));
    match got {
        Ok((batch, _permit)) => {
            assert_eq!(
                chunked_end,
                End::Complete,
                "{c:?}: ingested {} events",
                batch.len()
            );
        }
        Err(IngestError::Input(e)) => {
            if e.limit.as_deref() == Some(LIMIT_BODY_BYTES) {
                assert_eq!(chunked_end, End::TooLarge, "{c:?}: {e:?}");
            }
        }
        Err(e) => panic!("{c:?}: ingest failed with {e:?}, not an input error"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::seeds;

    #[test]
    fn layout() {
        let c = case(b"\x05\x00\x03ab").unwrap();
        assert_eq!(
            (c.encoding, c.max_body_bytes, c.cut),
            (Encoding::Zstd, 64, 3)
        );
        assert_eq!(c.content.as_deref(), Some(&b"abab"[..]));
        let c = case(b"\x02\xff\x00xyz").unwrap();
        assert_eq!((c.encoding, c.max_body_bytes), (Encoding::Gzip, 16 << 10));
        assert_eq!((c.body.as_slice(), c.content), (&b"xyz"[..], None));
        assert!(case(b"\x00\x00").is_none());
    }

    #[test]
    fn bombs_stop_at_the_limit() {
        // 64 KiB of zeros from a few hundred compressed bytes, against a 16 KiB limit: the
        // reader stops one chunk past the limit.
        for mode in [0b11_1100u8, 0b11_1101] {
            let mut input = vec![mode, 255, 7];
            input.extend_from_slice(&[0; 8]);
            let c = case(&input).unwrap();
            assert_eq!(c.content.as_ref().map(Vec::len), Some(MAX_CONTENT));
            assert!(c.body.len() < 1024, "{}", c.body.len());
            let (out, end) = pull(&c, 7);
            assert_eq!(end, End::TooLarge);
            assert!(out.len() <= (16 << 10) + CHUNK_BYTES, "{}", out.len());
            content_is_bounded(&input);
        }
    }

    #[test]
    fn seeds_decode_and_hold() {
        let seeds = seeds::content();
        assert!(!seeds.is_empty());
        for s in &seeds {
            let c = case(s).unwrap();
            assert_eq!(pull(&c, c.cut).1, End::Complete, "{c:?}");
            content_is_bounded(s);
        }
    }

    #[test]
    fn garbage_and_truncation() {
        for body in [
            &b"\x02\x10\x01\x1f\x8b\x08\x00"[..],
            b"\x03\x10\x00\x28\xb5\x2f\xfd",
            b"\x02\x00\x00",
        ] {
            content_is_bounded(body);
        }
        let seeds = seeds::content();
        for s in seeds.iter().filter(|s| s[0] & 2 != 0) {
            for cut in 3..s.len() {
                content_is_bounded(&s[..cut]);
            }
        }
    }
}
