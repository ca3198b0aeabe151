//! The server's clock.

/// The server's clock in ms since the Unix epoch: what records' append times, the dedup
/// window and feature `ttl` are measured with (0 before 1970, saturating far after).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_after_2020() {
        assert!(now_ms() > 1_577_836_800_000);
    }
}
