//! Cluster mode's Kafka record values: never panic; what decodes encodes again and decodes.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vx_fuzz::cluster_record_roundtrips(data));
