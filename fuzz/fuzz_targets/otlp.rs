//! OTLP/HTTP bodies (traces or logs, protobuf or JSON) through the decoded-size bound, the
//! decoder and the mapping to events: never panics, and every event keeps the rules of
//! `/v1/events` (see `vx_fuzz`'s `otlp` module for the layout and the checks).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vx_fuzz::otlp_maps_consistently(data));
