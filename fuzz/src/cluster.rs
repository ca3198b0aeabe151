//! The `cluster` target: values of the records cluster mode writes to Kafka
//! (`vx_cluster::wire`), as the apply loop decodes them.

use vx_cluster::wire::{self, Body};

/// Decoding never panics, and a record that decodes encodes again to the same bytes (the
/// format has one encoding per value).
pub fn cluster_record_roundtrips(data: &[u8]) {
    let Ok(rec) = wire::decode(data) else {
        return;
    };
    let again = match &rec.body {
        Body::Events {
            batch,
            expected_last_seq,
        } => wire::encode_events(batch, None, rec.append_ms, *expected_last_seq, false),
        Body::EntityEvents { batch } => wire::encode_events(batch, None, rec.append_ms, None, true),
        Body::Delete { stream } => Some(wire::encode_delete(stream, rec.append_ms)),
        Body::FeaturePut { entity, set } => {
            Some(wire::encode_feature_put(entity, set, rec.append_ms))
        }
        Body::FeatureIncr { entity, name, by } => {
            Some(wire::encode_feature_incr(entity, name, *by, rec.append_ms))
        }
        Body::FeatureDelete { entity, name } => Some(wire::encode_feature_delete(
            entity,
            name.as_deref(),
            rec.append_ms,
        )),
    };
    let decoded_again = again.as_deref().map(wire::decode);
    assert!(
        matches!(decoded_again, Some(Ok(_))),
        "record {data:02x?} decodes but its encoding does not: {decoded_again:?}"
    );
}
