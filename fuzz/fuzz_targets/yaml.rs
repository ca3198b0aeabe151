//! `yaml` body decoding: never panics; the outcome does not depend on where the reads split
//! (see `vx_fuzz` for the layout); the output is bounded by the body's size; and every accepted
//! event's canonical YAML document decodes back to the same canonical JSON.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vx_fuzz::yaml_roundtrips(data));
