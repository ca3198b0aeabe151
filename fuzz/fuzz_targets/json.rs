//! `json` body decoding: never panics, and the outcome is the same whether the body arrives in
//! one chunk or in the chunks the input's prefix describes (see `vx_fuzz` for the layout).

#![no_main]

use libfuzzer_sys::fuzz_target;
use vx_proto::decode::Format;

fuzz_target!(|data: &[u8]| vx_fuzz::chunking_is_invisible(Format::Json, data));
