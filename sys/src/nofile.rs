//! The process's limit on open descriptors.

use std::io;

/// Raise the soft limit on open descriptors to the hard limit, so that connections and the
/// log's descriptor cache never meet a low default. Returns the (soft, hard) limits now in
/// force.
pub fn raise_nofile_limit() -> io::Result<(u64, u64)> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        setrlimit(Resource::Nofile, lim).map_err(io::Error::from)?;
    }
    let lim = getrlimit(Resource::Nofile);
    Ok((
        lim.current.unwrap_or(u64::MAX),
        lim.maximum.unwrap_or(u64::MAX),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
        let (soft, hard) = raise_nofile_limit().unwrap();
        assert_eq!(soft, hard);
    }
}
