//! gzip and zstd request bodies through vx-ingest's decompression with a small body limit:
//! never panics, never holds more than the limit plus one chunk, and decompresses the same
//! whatever the chunking (see `vx_fuzz`'s `content` module for the layout).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vx_fuzz::content_is_bounded(data));
