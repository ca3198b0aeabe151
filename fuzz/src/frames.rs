//! The `frames` target: HTTP bodies of `application/vnd.veltrix.frames` (BATCH frames back to
//! back) through [`vx_proto::frames::FramesDecoder`], with the chunked targets' input layout.

use vx_proto::decode::Format;
use vx_proto::frames::{BatchHead, WireEvent, encode_batch};

use crate::{MAX_BODY, canonical_all, canonical_reparses, decode, decode_batch, plan};

/// Decoding a frames body never panics; the outcome (events, or the whole error) is the same in
/// one chunk and in the chunks the input's prefix picks; and an accepted batch, encoded again
/// with the frames encoder as one BATCH frame, decodes to the same events.
pub fn frames_roundtrip(data: &[u8]) {
    let p = plan(data);
    if p.body.len() > MAX_BODY {
        return;
    }
    let whole = decode_batch(Format::Frames, p.max_event_bytes, p.body, &[]);
    let chunked = decode(Format::Frames, p.max_event_bytes, p.body, p.sizes);
    let whole_canonical = whole.as_ref().map(canonical_all).map_err(Clone::clone);
    assert_eq!(
        whole_canonical, chunked,
        "frames body {:02x?} (max_event_bytes {}, chunk sizes {:?}): one chunk and chunked \
         disagree",
        p.body, p.max_event_bytes, p.sizes
    );
    let (Ok(batch), Ok(events)) = (whole, whole_canonical) else {
        return;
    };
    for ev in &events {
        canonical_reparses(ev);
    }
    let wires: Vec<WireEvent<'_>> = batch.iter().map(WireEvent::from).collect();
    let mut again = Vec::new();
    if let Err(e) = encode_batch(&mut again, &BatchHead::default(), &wires) {
        panic!(
            "frames body {:02x?}: its decoded events do not encode again: {e}",
            p.body
        );
    }
    // The events were each within the limit; encoded again they are no larger (`data` is
    // compacted, an empty entity dropped).
    let back = decode(Format::Frames, p.max_event_bytes, &again, &[]);
    assert_eq!(
        back.as_ref(),
        Ok(&events),
        "frames body {:02x?} decodes to {:?}, but those events encoded again ({:02x?}) decode \
         to something else",
        p.body,
        events
            .iter()
            .map(|e| String::from_utf8_lossy(e))
            .collect::<Vec<_>>(),
        again
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use vx_proto::Kind;

    use super::*;
    use crate::seeds;

    #[test]
    fn seeds_decode_and_roundtrip() {
        let seeds = seeds::frames();
        assert!(!seeds.is_empty());
        for s in &seeds {
            let p = plan(s);
            let batch = decode_batch(Format::Frames, p.max_event_bytes, p.body, p.sizes).unwrap();
            assert!(!batch.is_empty());
            frames_roundtrip(s);
        }
    }

    #[test]
    fn entity_and_whitespace_normalise_before_the_reencode() {
        let ev = WireEvent {
            stream: "s",
            entity: Some(""),
            ty: "t",
            ts: None,
            kind: Kind::Event,
            value: None,
            id: None,
            data: Some("[ 1 , 2 ]"),
        };
        let mut body = vec![0x7f, 1, 7];
        encode_batch(&mut body, &BatchHead::default(), &[ev]).unwrap();
        frames_roundtrip(&body);
    }

    #[test]
    fn broken_bodies_are_errors_in_any_chunking() {
        let mut body = vec![0, 0];
        body.extend_from_slice(&seeds::frames()[0][2..]);
        for cut in 0..body.len() {
            let mut input = vec![0u8, 1, 3];
            input.extend_from_slice(&body[..cut]);
            frames_roundtrip(&input);
        }
    }
}
