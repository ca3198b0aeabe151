//! One event object: parsing never panics, and an accepted event's canonical JSON, minus its
//! `seq`, parses back to an equal event.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vx_fuzz::event_roundtrips(data));
