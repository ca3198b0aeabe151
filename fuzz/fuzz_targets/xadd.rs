//! `XADD`'s field/value pairs mapped to an event (`vx_proto::xadd`): never a panic, and an
//! accepted event is one the JSON decoder accepts, equal to it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vx_fuzz::xadd_maps(data));
