//! Unit and property tests of OTLP decoding and mapping.
