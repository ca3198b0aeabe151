//! Frames body decoding (`application/vnd.veltrix.frames`): never panics; one chunk and the
//! chunks the input's prefix describes give the same outcome; an accepted batch encoded again
//! with the frames encoder decodes to the same events.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vx_fuzz::frames_roundtrip(data));
